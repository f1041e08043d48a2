//! HTTP sink (reqwest): POST with `Idempotency-Key: <record id>`.
