//! Spans for generated glue: an error on an expression built from the user's tokens lands on those
//! tokens, not on the attribute.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::ToTokens;

/// The first and last token spans of `tokens`: an error on an expression built with them covers
/// the whole of the user's tokens, not only the first (a joined span is not available on stable).
pub(crate) fn range(tokens: &impl ToTokens) -> (Span, Span) {
    let mut iter = tokens.to_token_stream().into_iter();
    let first = iter.next().map_or_else(Span::call_site, |t| t.span());
    let last = iter.last().map_or(first, |t| t.span());
    (first, last)
}

/// `path(argument)`, spanned so that an error on the call or on its argument covers `start..end`.
pub(crate) fn call(
    start: Span,
    end: Span,
    path: TokenStream,
    argument: TokenStream,
) -> TokenStream {
    let mut args = Group::new(Delimiter::Parenthesis, expr(start, end, argument));
    args.set_span(end);
    let mut call = respan(path, start);
    call.extend([TokenTree::Group(args)]);
    call
}

/// `tokens` with every span `start` but the last token's, `end`: rustc reports an error on the
/// expression from the first token to the last, so it covers the user's tokens.
pub(crate) fn expr(start: Span, end: Span, tokens: TokenStream) -> TokenStream {
    let mut tokens: Vec<TokenTree> = respan(tokens, start).into_iter().collect();
    if let Some(last) = tokens.last_mut() {
        last.set_span(end);
    }
    tokens.into_iter().collect()
}

fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                token = TokenTree::Group(inner);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}
