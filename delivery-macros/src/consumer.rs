//! `#[consumer]`: a unit handler the consumer runtime runs, with the shared arguments and checks
//! only. The annotated `async fn` becomes a unit struct of the same name implementing `Handler<S>`;
//! the function as written stays callable as `name::handle(..)`.

use crate::check::wording::{self, Wording};
use crate::kind::{Kind, Runtime};

pub(crate) struct Consumer;

impl Kind for Consumer {
    const NAME: &'static str = "consumer";
    const RUNTIME: Runtime = Runtime::CONSUMER;
    const WORDING: Wording = wording::HANDLER;
    type Own = ();
}
