//! NATS JetStream pull consumers (feature `nats`).
