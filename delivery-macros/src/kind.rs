//! What an attribute supplies to the shared stages: its name, the runtime trait its functions are
//! run through, how its errors are worded, and its own arguments, checks and items where it has
//! any. Each attribute implements [`Kind`] in its own file; the stages never ask which attribute
//! they expand.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::Type;

use crate::ast::Handler;
use crate::attr::Args;
use crate::check::Checked;
use crate::check::wording::Wording;
use crate::ctxt::Ctxt;
use crate::span;

/// A handler attribute: data (the consts) and hooks (the fns, whose defaults fit an attribute with
/// nothing of its own).
pub(crate) trait Kind {
    /// The attribute's name, as written: `#[consumer]`.
    const NAME: &'static str;
    /// The runtime trait the generated type implements.
    const RUNTIME: Runtime;
    /// How the shared checks word their errors.
    const WORDING: Wording;
    /// The attribute's own arguments, `()` when it takes only the shared ones.
    type Own: Default;
    /// Whether its function may take a `Batch<T>` (many units per run).
    const BATCHES: bool = false;

    /// The arguments: by default the shared ones only, with an error listing them on any other.
    fn parse_args(attr: TokenStream, cx: &Ctxt) -> (Args, Self::Own) {
        (Args::parse(attr, cx), Self::Own::default())
    }

    /// Checks of the attribute's own, run after the shared ones on a function whose shape passed.
    /// A parameter refused here is marked (`ok = false`), so no type-level probe repeats the error.
    fn check(_handler: &Handler<Self::Own>, _checked: &mut Checked, _cx: &Ctxt) {}

    /// The state a handler that names none runs against; `None`: any state, the generated impl
    /// is generic over it.
    fn default_state() -> Option<Type> {
        None
    }

    /// A statement that fails to compile, on the parameter, when `ty` cannot be resolved against
    /// `state`.
    fn assert_extractor(krate: &TokenStream, ty: &Type, state: &TokenStream) -> TokenStream {
        let private = quote!(#krate::__private);
        let (start, _) = span::range(ty);
        let assert = proc_macro2::Ident::new(Self::RUNTIME.assert_extractor, start);
        quote_spanned!(start=> #private::#assert::<#ty, #state>();)
    }

    /// An expression resolving one parameter of type `ty` from `__delivery_unit` and
    /// `__delivery_state`, to a `Result<ty, Malformed>`.
    fn extract(krate: &TokenStream, ty: &Type, state: &TokenStream) -> TokenStream {
        let private = quote!(#krate::__private);
        let (start, end) = span::range(ty);
        let extract = format_ident!("{}", Self::RUNTIME.extract);
        let path = quote!(#private::#extract::<#ty, #state>);
        span::call(start, end, path, quote!(__delivery_unit, __delivery_state))
    }

    /// Items of the attribute's own, after the handler type and its impls. `checked.state` is the
    /// state as the function names it, before [`Kind::default_state`].
    fn expand(_handler: &Handler<Self::Own>, _checked: &Checked, _has_errors: bool) -> TokenStream {
        TokenStream::new()
    }
}

/// A runtime trait a generated type implements, by its names in `__private`.
pub(crate) struct Runtime {
    /// The trait, generic over the state: `Handler`.
    pub(crate) handler: &'static str,
    /// What the trait's `call` is given: `Unit`.
    pub(crate) input: &'static str,
    /// What `call` resolves to: `Outcome`.
    pub(crate) outcome: &'static str,
    /// The method turning the function's return value into the outcome, by autoref specialization
    /// (`(&&Returned::new(value)).outcome()`), and the traits that provide it, tried in order.
    pub(crate) convert: &'static str,
    pub(crate) convert_traits: [&'static str; 3],
    /// The path, under `__private`, of the function or variant turning a `Malformed` (a parameter
    /// that could not be extracted) into the outcome.
    pub(crate) malformed: &'static [&'static str],
    /// The trait a parameter implements to be resolved from the input: `FromUnit`.
    pub(crate) extractor: &'static str,
    /// The function resolving one parameter: `extract::<T, S>(input, state)`.
    pub(crate) extract: &'static str,
    /// The function asserting at the definition that a parameter can be resolved:
    /// `assert_extractor::<T, S>()`.
    pub(crate) assert_extractor: &'static str,
    /// How the generated docs name the function and what calls it through the trait.
    pub(crate) function: &'static str,
    pub(crate) caller: &'static str,
    /// The trait's const saying whether a handler takes the input's transaction, set from the
    /// extractors' own (`IN_TRANSACTION`); `None` where the runtime has no such transaction.
    pub(crate) in_transaction: Option<&'static str>,
}

impl Runtime {
    /// The consumer runtime: a `Handler<S>` is called with a `Unit` and resolves to an `Outcome`.
    /// A webhook handler is a consumer handler whose unit arrived over HTTP.
    pub(crate) const CONSUMER: Runtime = Runtime {
        handler: "Handler",
        input: "Unit",
        outcome: "Outcome",
        convert: "outcome",
        convert_traits: ["ViaBoxError", "ViaHandlerError", "ViaNothing"],
        malformed: &["malformed"],
        extractor: "FromUnit",
        extract: "extract",
        assert_extractor: "assert_extractor",
        function: "handler",
        caller: "runtime",
        in_transaction: Some("IN_TRANSACTION"),
    };
}
