//! Redis Streams consumer groups (feature `redis`).
