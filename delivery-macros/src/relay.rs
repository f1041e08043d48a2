//! `#[relay]`: a relay function the outbox relay runs, once per attempt, under the record's own id.
//! The shared arguments and checks, worded for rule 6: the function's parameters come from the
//! outbox record (`FromRecord`), and it returns the receiver's acknowledgement, a `Receipt`, which
//! only a sink produces once the receiver confirmed.

use crate::check::wording::{self, Forbidden, Wording};
use crate::kind::{Kind, Runtime};

pub(crate) struct Relay;

impl Kind for Relay {
    const NAME: &'static str = "relay";
    /// A `Relay<S>` is called with a `Record` and resolves to an `Attempt`.
    const RUNTIME: Runtime = Runtime {
        handler: "Relay",
        input: "Record",
        outcome: "Attempt",
        convert: "attempt",
        convert_traits: [
            "AttemptViaBoxError",
            "AttemptViaHandlerError",
            "AttemptViaNothing",
        ],
        malformed: &["Attempt", "Malformed"],
        extractor: "FromRecord",
        extract: "extract_record",
        assert_extractor: "assert_record_extractor",
        function: "relay function",
        caller: "relay",
        in_transaction: None,
    };
    const WORDING: Wording = Wording {
        param: param_message,
        call: call_message,
        returns_nothing,
        cannot_fail,
    };
    type Own = ();
}

/// Why a relay function must not read the clock, and what to do instead.
const CLOCK: (&str, &str) = (
    "every attempt must send the record as it was written",
    "any time the receiver needs belongs in the payload, written in the same transaction as the effect",
);
const MINTER_HELP: &str = "send under `record.id()`, or derive from it: `Uuid::new_v5(&namespace, record.id().as_str().as_bytes())`";

fn param_message(kind: Forbidden, name: &str) -> String {
    match kind {
        Forbidden::Clock => refused(format!("take a clock (`{name}`)"), CLOCK),
        Forbidden::Minter => refused(
            format!("take an id minter or a random source (`{name}`)"),
            (
                "every attempt must send under the record's own id, or the receiver cannot deduplicate",
                MINTER_HELP,
            ),
        ),
        // Acknowledgement belongs to the relay as it belongs to the consumer runtime.
        Forbidden::AckHandle => (wording::HANDLER.param)(kind, name),
    }
}

fn call_message(kind: Forbidden, call: &str) -> String {
    match kind {
        Forbidden::Clock => refused(format!("read the clock (`{call}`)"), CLOCK),
        Forbidden::Minter => refused(
            format!("mint ids or randomness (`{call}`)"),
            (
                "every attempt would send under a new id, and the receiver could not deduplicate",
                MINTER_HELP,
            ),
        ),
        Forbidden::AckHandle => (wording::HANDLER.call)(kind, call),
    }
}

/// `a relay function must not {what}: {why} (rule 6)`, and what to do instead.
fn refused(what: String, (why, help): (&str, &str)) -> String {
    format!("a relay function must not {what}: {why} (rule 6)\nhelp: {help}")
}

const RETURN_HELP: &str =
    "return `Result<Receipt, HandlerError>`, the `Receipt` coming from a sink's `send(..).await?`";

fn returns_nothing(name: &syn::Ident) -> String {
    format!(
        "`{name}` returns `()`, which proves nothing: the relay would mark a record delivered that no receiver confirmed (rule 6)\n\
         help: {RETURN_HELP}"
    )
}

fn cannot_fail(ty: &str) -> String {
    format!(
        "a relay function returning `{ty}` proves nothing: the relay would mark a record delivered that no receiver confirmed (rule 6)\n\
         help: {RETURN_HELP}"
    )
}
