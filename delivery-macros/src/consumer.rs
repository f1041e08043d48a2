//! `#[consumer]`: a unit handler the consumer runtime runs, with the shared arguments and checks
//! only. The annotated `async fn` becomes a unit struct of the same name implementing `Handler<S>`
//! — or `BatchHandler<S>` when it takes a `Batch<T>` (and then `State<S>` only beside it); the
//! function as written stays callable as `name::handle(..)`.

use crate::ast::Handler;
use crate::check::wording::{self, Wording};
use crate::check::{Checked, batch_param, state_param};
use crate::ctxt::Ctxt;
use crate::kind::{Kind, Runtime};

pub(crate) struct Consumer;

impl Kind for Consumer {
    const NAME: &'static str = "consumer";
    const RUNTIME: Runtime = Runtime::CONSUMER;
    const WORDING: Wording = wording::HANDLER;
    type Own = ();
    const BATCHES: bool = true;

    /// A batch handler takes its units as `Batch<T>` and, beside it, its state only: what else a
    /// unit handler takes (its id, count, stamp, headers) is each item's.
    fn check(_handler: &Handler<()>, checked: &mut Checked, cx: &Ctxt) {
        let Some((position, _)) = checked.batch else {
            return;
        };
        for (i, param) in checked.params.iter_mut().enumerate() {
            if i == position {
                continue;
            }
            if batch_param(&param.ty).is_some() {
                // A second `Batch`: refused once already.
                param.ok = false;
            } else if state_param(&param.ty).is_none() {
                param.ok = false;
                cx.error_spanned_by(
                    &param.ty,
                    "a batch handler takes `Batch<T>` and `State<S>` only: each unit's id, \
                     delivery count, stamp and headers are on its item (`item.id()`, \
                     `item.delivery_count()`, `item.stamp()`, `item.headers()`)",
                );
            }
        }
    }
}
