//! RabbitMQ sink: persistent, mandatory publishes under publisher confirms, pipelined.
