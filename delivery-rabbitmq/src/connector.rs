//! Where the transport gets its connections ([`RabbitConnector`]), the connection it leases from
//! one ([`Leased`]), and the bounded dial and close every part of the crate uses.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lapin::{Connection, ConnectionProperties};

use delivery_core::transport::{TransportError, TransportErrorKind};

/// Where the RabbitMQ transport gets its connections: a URL it dials itself, **your own**
/// [`Connection`], or **your own factory** of connections. Every constructor that talks to the
/// broker takes one (`impl Into<RabbitConnector>`): [`declare`](crate::declare), [`RabbitSource::connect`](crate::RabbitSource::connect),
/// [`RabbitDeadLetters::new`](crate::RabbitDeadLetters::new), [`ConfirmedPublisher::new`](crate::ConfirmedPublisher::new) and
/// [`RabbitSink::new`](crate::RabbitSink::new). A `&str` or `String` is a URL;
/// a [`Connection`] or `Arc<Connection>` is yours.
///
/// | made from | connections | after the connection is lost |
/// |---|---|---|
/// | a URL ([`url`](Self::url), [`url_with`](Self::url_with)) | dialled by the transport, with your [`ConnectionProperties`] | dialled again |
/// | your [`Connection`] ([`connection`](Self::connection)) | channels on yours; your `ConnectionProperties`, TLS and executor are kept | **not redialled**: see below |
/// | your factory ([`factory`](Self::factory)) | each one your factory's, asked for one whenever a connection is needed | your factory is asked again |
///
/// **Your connection stays yours.** The transport opens channels on it and never closes it. If
/// it is lost, the transport cannot dial it again: a [`RabbitSource`](crate::RabbitSource) then reports a
/// [`TransportError`] on each `receive` (the consumer runtime logs it and waits, growing to
/// 6.4 s, between tries) and opens a fresh channel on it as soon as it is connected again — which
/// happens only if lapin recovers it (`ConnectionProperties::enable_auto_recover`). Publishes
/// fail meanwhile, as retries. For a consumer that must outlive the connection, give a
/// [`factory`](Self::factory) instead: it is asked for a new connection after every loss, with
/// your settings.
///
/// **TLS** (`amqps://`): this crate builds lapin without a TLS backend. Enable one in your own
/// `Cargo.toml` — Cargo unifies the features, so the transport's lapin gets it too:
/// `lapin = { version = "4", default-features = false, features = ["tokio", "rustls"] }`
/// (`rustls`: aws-lc-rs with the platform's verifier; or `rustls--ring` with
/// `rustls-native-certs`, `native-tls`, `openssl`). An `amqps://` URL then works everywhere a URL
/// does; for client certificates or a private CA, connect with lapin's
/// `Connection::connect_with_config` and hand over the connection, or a factory making them.
///
/// ```no_run
/// use delivery::lapin::{Connection, ConnectionProperties};
/// use delivery::rabbitmq::{RabbitConnector, RabbitSource, RabbitTopology};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let topology = RabbitTopology::new("orders");
/// // Your own connection, with your own properties: shared, never closed by `delivery`.
/// let properties = ConnectionProperties::default()
///     .with_connection_name("billing".into())
///     .enable_auto_recover();
/// let connection = Connection::connect("amqps://user:pass@rabbit.internal/%2f", properties).await?;
/// delivery::rabbitmq::declare(connection, &topology).await?;
///
/// // Or a factory, asked again after each loss: the source then reconnects by itself.
/// let factory = RabbitConnector::factory(|| {
///     let properties = ConnectionProperties::default().with_connection_name("billing".into());
///     Connection::connect("amqps://user:pass@rabbit.internal/%2f", properties)
/// });
/// let source = RabbitSource::connect(factory, topology).await?;
/// # let _ = source; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RabbitConnector(Origin);

#[derive(Clone)]
enum Origin {
    Url(Arc<str>, ConnectionProperties),
    Connection(Arc<Connection>),
    Factory(Arc<Factory>),
}

type Factory = dyn Fn() -> Pin<Box<dyn Future<Output = Result<Connection, TransportError>> + Send>>
    + Send
    + Sync;

impl RabbitConnector {
    /// Dials `url` (`amqp://user:pass@host:port/vhost`, the vhost URL-encoded; `amqps://` with a
    /// TLS feature of lapin, see the type docs) with lapin's default properties.
    pub fn url(url: impl Into<Arc<str>>) -> Self {
        RabbitConnector::url_with(url, ConnectionProperties::default())
    }

    /// Dials `url` with your lapin connection `properties` (a connection name, an authentication
    /// provider, auto-recovery), used for every dial.
    pub fn url_with(url: impl Into<Arc<str>>, properties: ConnectionProperties) -> Self {
        RabbitConnector(Origin::Url(url.into(), properties))
    }

    /// Your `connection` (or an `Arc` of it, to keep using it elsewhere): channels are opened on
    /// it, and it is never closed nor redialled by the transport (see the type docs).
    pub fn connection(connection: impl Into<Arc<Connection>>) -> Self {
        RabbitConnector(Origin::Connection(connection.into()))
    }

    /// Your `factory`, called whenever the transport needs a connection — at start, and again
    /// after one was lost — so your `ConnectionProperties`, TLS configuration and executor are
    /// used for every connection, and a source reconnects by itself. Each call must make a new
    /// connection; the transport closes the ones it got when it is done with them. A call that
    /// gets no answer within 10 s is abandoned and made again, three times in all.
    ///
    /// ```no_run
    /// use delivery::lapin::{Connection, ConnectionProperties};
    /// use delivery::rabbitmq::RabbitConnector;
    ///
    /// let connector = RabbitConnector::factory(|| {
    ///     Connection::connect("amqp://guest:guest@127.0.0.1:5672/%2f", ConnectionProperties::default())
    /// });
    /// # let _ = connector;
    /// ```
    pub fn factory<F, Fut, E>(factory: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Connection, E>> + Send + 'static,
        E: StdError + Send + Sync + 'static,
    {
        let factory: Arc<Factory> = Arc::new(move || {
            let connecting = factory();
            Box::pin(async move {
                connecting
                    .await
                    .map_err(|e| crate::error::LAPIN.error("connecting to RabbitMQ (factory)", e))
            })
        });
        RabbitConnector(Origin::Factory(factory))
    }

    /// A connection: the caller's own, or a fresh one dialled (closed by [`Leased::close`]).
    pub(crate) async fn open(&self) -> Result<Leased, TransportError> {
        let dialled = match &self.0 {
            Origin::Connection(connection) => {
                let status = connection.status();
                if !status.connected() {
                    return Err(TransportError::msg(
                        "using the connection given to the transport",
                        format!(
                            "it is {}; it is yours, and the transport cannot dial it again: it \
                             is used again once lapin recovered it (`enable_auto_recover`), or \
                             give a `RabbitConnector::factory` to reconnect",
                            if status.reconnecting() {
                                "reconnecting"
                            } else if status.closing() || status.closed() {
                                "closed"
                            } else if status.errored() {
                                "lost"
                            } else {
                                "not connected"
                            }
                        ),
                    ));
                }
                return Ok(Leased {
                    connection: Arc::clone(connection),
                    owned: false,
                });
            }
            Origin::Url(url, properties) => dial_url(url, properties).await?,
            Origin::Factory(factory) => dial(|| factory()).await?,
        };
        Ok(Leased {
            connection: Arc::new(dialled),
            owned: true,
        })
    }
}

impl fmt::Debug for RabbitConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            // The URL may carry a password: only its scheme and host are shown.
            Origin::Url(url, _) => {
                let host = url.rsplit_once('@').map_or(&**url, |(_, host)| host);
                f.debug_tuple("RabbitConnector::Url").field(&host).finish()
            }
            Origin::Connection(_) => f.write_str("RabbitConnector::Connection"),
            Origin::Factory(_) => f.write_str("RabbitConnector::Factory"),
        }
    }
}

impl From<&str> for RabbitConnector {
    fn from(url: &str) -> Self {
        RabbitConnector::url(url)
    }
}

impl From<&String> for RabbitConnector {
    fn from(url: &String) -> Self {
        RabbitConnector::url(url.as_str())
    }
}

impl From<String> for RabbitConnector {
    fn from(url: String) -> Self {
        RabbitConnector::url(url)
    }
}

impl From<Arc<str>> for RabbitConnector {
    fn from(url: Arc<str>) -> Self {
        RabbitConnector::url(url)
    }
}

impl From<Connection> for RabbitConnector {
    fn from(connection: Connection) -> Self {
        RabbitConnector::connection(connection)
    }
}

impl From<Arc<Connection>> for RabbitConnector {
    fn from(connection: Arc<Connection>) -> Self {
        RabbitConnector::connection(connection)
    }
}

/// A connection from a [`RabbitConnector`]: the caller's, or one the transport dialled.
pub(crate) struct Leased {
    connection: Arc<Connection>,
    /// Dialled by the transport, so it closes it; the caller's is never closed.
    owned: bool,
}

impl Deref for Leased {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.connection
    }
}

impl Leased {
    /// Closes the connection if the transport dialled it (see [`close`]); the caller's stays open.
    pub(crate) async fn close(&self, why: &str) {
        if self.owned {
            close(&self.connection, why).await;
        }
    }
}

/// Opens a connection to `url` (`amqp://user:pass@host:port/vhost`, the vhost URL-encoded).
///
/// Each attempt is bounded (10 s), and a connection attempt that gets no answer is made again,
/// three times in all: lapin's handshake can wait forever when the broker closes the connection
/// during it (a handshake timeout under load), and a source must not hang on that.
pub async fn connect(url: &str) -> Result<Connection, TransportError> {
    dial_url(url, &ConnectionProperties::default()).await
}

async fn dial_url(
    url: &str,
    properties: &ConnectionProperties,
) -> Result<Connection, TransportError> {
    dial(|| {
        let properties = properties.clone();
        async move {
            Connection::connect(url, properties)
                .await
                .map_err(|e| crate::error::LAPIN.error("connecting to RabbitMQ", e))
        }
    })
    .await
}

/// Makes a connection with `attempt`, each attempt bounded (10 s), three attempts in all.
async fn dial<F>(attempt: impl Fn() -> F) -> Result<Connection, TransportError>
where
    F: Future<Output = Result<Connection, TransportError>>,
{
    const ATTEMPT: Duration = Duration::from_secs(10);
    for _ in 1..3 {
        match tokio::time::timeout(ATTEMPT, attempt()).await {
            Ok(connected) => return connected,
            Err(_) => {
                tracing::warn!("no answer from RabbitMQ within {ATTEMPT:?}; connecting again")
            }
        }
    }
    tokio::time::timeout(ATTEMPT, attempt())
        .await
        .map_err(|_| {
            TransportError::msg(
                "connecting to RabbitMQ",
                format!("no answer within {ATTEMPT:?}, three times"),
            )
            .with_kind(TransportErrorKind::ConnectionLost)
        })?
}

/// Closes `connection`, waiting at most 5 s for the broker's answer (lapin's close can wait
/// forever when the socket went first).
pub(crate) async fn close(connection: &Connection, why: &str) {
    let _ = tokio::time::timeout(Duration::from_secs(5), connection.close(200, why.into())).await;
}

/// Closes `channel`, waiting at most 5 s (as [`close`]).
pub(crate) async fn close_channel(channel: &lapin::Channel, why: &str) {
    let _ = tokio::time::timeout(Duration::from_secs(5), channel.close(200, why.into())).await;
}
