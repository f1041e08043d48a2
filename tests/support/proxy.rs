//! A loopback TCP proxy for the outage tests: accepts on a port of its own and forwards each
//! connection to a server, until [`Proxy::drop_all`] closes every connection it carries at once,
//! as a server restart or a network failover does to its clients, while the server keeps its
//! state. New connections can be refused for a while after.
#![allow(dead_code)] // each test binary uses part of it

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use tokio::time::Instant;

pub struct Proxy {
    address: SocketAddr,
    state: Arc<State>,
    accepting: AbortHandle,
}

#[derive(Default)]
struct State {
    /// The task of each connection carried: aborting it closes both of its sockets.
    connections: Mutex<Vec<AbortHandle>>,
    /// New connections are closed as soon as accepted until then.
    refuse_until: Mutex<Option<Instant>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Proxy {
    /// Listens on a free loopback port at once (so the port can be advertised before the server
    /// starts) and forwards what it accepts to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let accepting = tokio::spawn({
            let state = state.clone();
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let refusing = lock(&state.refuse_until).is_some_and(|t| Instant::now() < t);
                    if refusing {
                        drop(client);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        let mut client = client;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    });
                    let mut connections = lock(&state.connections);
                    connections.retain(|c| !c.is_finished());
                    connections.push(task.abort_handle());
                }
            }
        })
        .abort_handle();
        Proxy {
            address,
            state,
            accepting,
        }
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Closes every connection carried now, and refuses new ones (closes them as soon as
    /// accepted) for `refuse`. Returns how many were open.
    pub fn drop_all(&self, refuse: Duration) -> usize {
        *lock(&self.state.refuse_until) = Some(Instant::now() + refuse);
        let connections = std::mem::take(&mut *lock(&self.state.connections));
        let open = connections.iter().filter(|c| !c.is_finished()).count();
        for connection in connections {
            connection.abort();
        }
        open
    }

    /// How many connections it carries now.
    pub fn open(&self) -> usize {
        lock(&self.state.connections)
            .iter()
            .filter(|c| !c.is_finished())
            .count()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.drop_all(Duration::ZERO);
    }
}
