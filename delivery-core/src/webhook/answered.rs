//! The webhook requests counter (`delivery_webhook_requests_total`, named in
//! [`observe`](crate::observe)).

use super::scheme::Scheme;
use crate::observe::WEBHOOK_REQUESTS;

/// Counts one webhook delivery answered with `status`.
pub fn webhook_answered(webhook: &'static str, scheme: &Scheme, status: http::StatusCode) {
    let scheme = match scheme {
        Scheme::GitHub => "github",
        Scheme::Stripe => "stripe",
        Scheme::StandardWebhooks => "standard_webhooks",
        Scheme::Slack => "slack",
        Scheme::Shopify => "shopify",
        Scheme::Hmac(_) => "hmac",
    };
    webhook_counter(webhook, scheme, status).increment(1);
}

/// The counter of webhook deliveries to `webhook` under `scheme` answered with `status`.
pub fn webhook_counter(
    webhook: &'static str,
    scheme: &'static str,
    status: http::StatusCode,
) -> metrics::Counter {
    metrics::counter!(WEBHOOK_REQUESTS, "webhook" => webhook, "scheme" => scheme, "status" => status.as_str().to_owned())
}
