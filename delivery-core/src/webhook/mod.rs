//! Webhook verification (rule 5). Being written.
