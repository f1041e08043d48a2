//! Publishing a unit as a stream entry in the layout the source reads.

use ::redis::aio::ConnectionLike;

use crate::codec::{FIELD_ID, FIELD_PAYLOAD};
use delivery_core::transport::{TransportError, TransportErrorKind};
use delivery_core::unit::Unit;

/// Adds `unit` to `stream` (`XADD <stream> * id <unit id> payload <payload> <header> <value>
/// ...`) and returns the entry id Redis gave it. Redis answers once the entry is in the stream.
///
/// A header named `id` or `payload` would be read back as the unit's id or payload, so it is
/// refused. A unit with a [`Stamp`](delivery_core::Stamp) carries it as [`headers::STAMP`](delivery_core::headers::STAMP),
/// and the source reads it as the unit's stamp instead of the entry id (rule 4).
///
/// ```no_run
/// # async fn run() -> Result<(), delivery::transport::TransportError> {
/// use delivery::{Headers, Unit};
///
/// let mut connection = delivery::redis::connect("redis://127.0.0.1:6379").await?;
/// let unit = Unit::new("order-1", r#"{"order_id":"o-1"}"#)
///     .with_headers(Headers::from_pairs([("tenant", "acme")]));
/// let entry_id = delivery::redis::publish(&mut connection, "orders", &unit).await?;
/// # let _ = entry_id; Ok(()) }
/// ```
pub async fn publish(
    connection: &mut (impl ConnectionLike + Send),
    stream: &str,
    unit: &Unit,
) -> Result<String, TransportError> {
    let mut add = ::redis::cmd("XADD");
    add.arg(stream)
        .arg("*")
        .arg(FIELD_ID)
        .arg(unit.id().as_str())
        .arg(FIELD_PAYLOAD)
        .arg(unit.payload().as_ref());
    for (name, value) in unit.headers().iter() {
        if name == FIELD_ID || name == FIELD_PAYLOAD {
            return Err(TransportError::msg(
                "publishing (XADD)",
                format!("the header `{name}` would be read back as the unit's own `{name}` field"),
            )
            .with_kind(TransportErrorKind::Refused));
        }
        add.arg(name).arg(value.as_ref());
    }
    if let Some(stamp) = unit.stamp() {
        add.arg(delivery_core::headers::STAMP).arg(stamp.0);
    }
    add.query_async::<String>(connection)
        .await
        .map_err(|e| crate::error::REDIS.error("publishing (XADD)", e))
}
