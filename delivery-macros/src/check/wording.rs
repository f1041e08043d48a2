//! The wording of the checks' errors: what a forbidden thing is, and how a unit handler's errors
//! say which rule it breaks.

/// What a forbidden thing is, with the rule it breaks and what to do instead.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forbidden {
    Clock,
    Minter,
    AckHandle,
}

/// How the checks word their errors: what the function is and which rule it breaks. A unit
/// handler is held to rules 1 and 3 ([`HANDLER`]); an attribute whose function is something else
/// (`#[relay]`) words its own.
pub(crate) struct Wording {
    /// A parameter of a forbidden type, named by its path's last segment.
    pub(crate) param: fn(Forbidden, &str) -> String,
    /// A forbidden call in the body, as written (`SystemTime::now`).
    pub(crate) call: fn(Forbidden, &str) -> String,
    /// A function that returns `()` by having no return type.
    pub(crate) returns_nothing: fn(&syn::Ident) -> String,
    /// A return type that cannot carry a failure, as written (`bool`).
    pub(crate) cannot_fail: fn(&str) -> String,
}

/// The wording for a unit handler (`#[consumer]`, `#[webhook]`).
pub(crate) const HANDLER: Wording = Wording {
    param: handler_param,
    call: handler_call,
    returns_nothing: handler_returns_nothing,
    cannot_fail: handler_cannot_fail,
};

fn handler_param(kind: Forbidden, name: &str) -> String {
    match kind {
        Forbidden::Clock => format!(
            "a handler must not take a clock (`{name}`): every delivery would write a different time (rule 3)\n\
             help: take the time from the unit (a field of the payload, its `Stamp`, a header) so a redelivery writes the same value"
        ),
        Forbidden::Minter => format!(
            "a handler must not take an id minter or a random source (`{name}`): every delivery would create a new record (rule 3)\n\
             help: derive the id from the unit: its `UnitId`, an id in the payload, or `Uuid::new_v5(&namespace, unit_id.as_str().as_bytes())`"
        ),
        Forbidden::AckHandle => format!(
            "a handler must not take an acknowledgement handle (`{name}`): the runtime acknowledges after the effect (rule 1)\n\
             help: return `Ok(())` once the effect is committed and the runtime acknowledges; return an error and it returns or dead-letters the unit"
        ),
    }
}

fn handler_call(kind: Forbidden, call: &str) -> String {
    match kind {
        Forbidden::Clock => format!(
            "a handler must not read the clock (`{call}`): every delivery would write a different time (rule 3)\n\
             help: take the time from the unit (a field of the payload, its `Stamp`, a header); to time a latency metric \
             or wait for a deadline, use `delivery::Stopwatch`, which writes nothing"
        ),
        Forbidden::Minter => format!(
            "a handler must not mint ids or randomness (`{call}`): every delivery would create a new record (rule 3)\n\
             help: derive the id from the unit: its `UnitId`, an id in the payload, or `Uuid::new_v5(&namespace, unit_id.as_str().as_bytes())`"
        ),
        Forbidden::AckHandle => unreachable!("acknowledgement is found by type, not by call"),
    }
}

fn handler_returns_nothing(name: &syn::Ident) -> String {
    format!(
        "`{name}` returns `()`, which cannot report a failure: a failed unit would be acknowledged (rule 1)\n\
         help: return `Result<(), HandlerError>` (or any `Result<_, E>` with `E: Into<HandlerError>`)"
    )
}

fn handler_cannot_fail(ty: &str) -> String {
    format!(
        "a handler returning `{ty}` cannot report a failure: a failed unit would be acknowledged (rule 1)\n\
         help: return `Result<(), HandlerError>` (or any `Result<_, E>` with `E: Into<HandlerError>`)"
    )
}
