//! The unit of work a broker, a stream or a sender delivers, and what travels with it.
//!
//! Everything on a [`Unit`] comes from the mechanism that delivered it: nothing is read from the clock
//! or minted on receipt (rule 3), so every delivery of the same unit looks the same to a handler,
//! apart from its [`DeliveryCount`].

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use bytes::Bytes;

/// The identity of a unit, as the mechanism delivered it: a message id, a stream entry id, a
/// webhook delivery id. Every delivery of one unit carries the same id.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitId(Arc<str>);

impl UnitId {
    /// Wraps an id taken from the unit.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        UnitId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for UnitId {
    fn from(id: &str) -> Self {
        UnitId::new(id)
    }
}

impl From<String> for UnitId {
    fn from(id: String) -> Self {
        UnitId::new(id)
    }
}

/// Which delivery of its unit this is, counted by the mechanism (a quorum queue's
/// `x-delivery-count`, a pending entry's times-delivered, JetStream's `num_delivered`) or carried
/// with the unit — never by the process, which a restart resets (rule 2).
///
/// The first delivery is `1`. Transports whose broker counts from zero normalise to this.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct DeliveryCount(NonZeroU32);

impl DeliveryCount {
    /// The first delivery.
    pub const FIRST: DeliveryCount = DeliveryCount(NonZeroU32::MIN);

    /// The `n`th delivery; `0` is read as the first.
    pub fn new(n: u32) -> Self {
        DeliveryCount(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
    }

    /// The number of this delivery, from 1.
    pub fn get(self) -> u32 {
        self.0.get()
    }

    /// Whether this is a redelivery (any delivery after the first).
    pub fn is_redelivery(self) -> bool {
        self.get() > 1
    }

    /// The next delivery's count.
    pub fn next(self) -> Self {
        DeliveryCount(self.0.saturating_add(1))
    }
}

impl fmt::Display for DeliveryCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// An ordering stamp the unit carries and every delivery of it repeats — a version, a sequence
/// number, a source timestamp. A store guards its writes with it, so an older unit arriving late
/// never replaces a newer one (rule 4).
///
/// A stamp is at most `i64::MAX`, what the stores hold (a `BIGINT`): a unit carrying a larger one
/// is malformed for a handler that takes its stamp, and goes to the dead letter at once.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Stamp(pub u64);

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Read-only headers delivered with a unit. Values are bytes; most are text.
///
/// Empty headers (the common case) cost no allocation.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(Option<Arc<BTreeMap<String, Bytes>>>);

impl Headers {
    /// Builds headers from name/value pairs.
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<Bytes>,
    {
        let map: BTreeMap<String, Bytes> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Headers((!map.is_empty()).then(|| Arc::new(map)))
    }

    /// The raw value of a header.
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.0.as_ref()?.get(name)
    }

    /// The value of a header, if it is present and UTF-8.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Iterates over all headers in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Bytes)> {
        self.0
            .iter()
            .flat_map(|map| map.iter())
            .map(|(k, v)| (k.as_str(), v))
    }

    /// The number of headers.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |map| map.len())
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy with one header set; used by transports recording a dead letter's reason.
    pub fn with(&self, name: impl Into<String>, value: impl Into<Bytes>) -> Headers {
        let mut map = self.0.as_deref().cloned().unwrap_or_default();
        map.insert(name.into(), value.into());
        Headers(Some(Arc::new(map)))
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (k, v) in self.iter() {
            match std::str::from_utf8(v) {
                Ok(s) => map.entry(&k, &s),
                Err(_) => map.entry(&k, v),
            };
        }
        map.finish()
    }
}

/// A unit of work as delivered: payload bytes, id, delivery count, optional ordering stamp and
/// headers. Cloning is cheap (the payload and headers are shared).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    id: UnitId,
    payload: Bytes,
    delivery_count: DeliveryCount,
    stamp: Option<Stamp>,
    headers: Headers,
    attachment: Attachment,
}

/// What a transport attaches to a unit for one of its own extractors (a database queue's
/// transaction slot, for its `Tx`): not part of the unit's value, so two deliveries compare
/// equal whatever each carries, and never shown.
#[derive(Clone, Default)]
struct Attachment(Option<Arc<dyn std::any::Any + Send + Sync>>);

impl PartialEq for Attachment {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Attachment {}

impl fmt::Debug for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "attached" } else { "none" })
    }
}

impl Unit {
    /// A unit with `id` and `payload`, on its first delivery, no stamp and no headers.
    pub fn new(id: impl Into<UnitId>, payload: impl Into<Bytes>) -> Self {
        Unit {
            id: id.into(),
            payload: payload.into(),
            delivery_count: DeliveryCount::FIRST,
            stamp: None,
            headers: Headers::default(),
            attachment: Attachment::default(),
        }
    }

    /// A unit whose payload is `value` encoded as JSON.
    ///
    /// # Panics
    /// If `value`'s `Serialize` implementation fails (maps with non-string keys, for example).
    pub fn json(id: impl Into<UnitId>, value: &impl serde::Serialize) -> Self {
        let payload = serde_json::to_vec(value).expect("the value serializes to JSON");
        Unit::new(id, payload)
    }

    /// Sets the delivery count (transports set the mechanism's count here).
    pub fn with_delivery_count(mut self, count: DeliveryCount) -> Self {
        self.delivery_count = count;
        self
    }

    /// Sets the ordering stamp.
    pub fn with_stamp(mut self, stamp: Stamp) -> Self {
        self.stamp = Some(stamp);
        self
    }

    /// Sets the headers.
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// The unit's id.
    pub fn id(&self) -> &UnitId {
        &self.id
    }

    /// The payload exactly as delivered.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Which delivery of this unit this is.
    pub fn delivery_count(&self) -> DeliveryCount {
        self.delivery_count
    }

    /// The ordering stamp, if the unit carries one.
    pub fn stamp(&self) -> Option<Stamp> {
        self.stamp
    }

    /// The headers delivered with the unit.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// Attaches `value` for an extractor of the transport's own to find
    /// ([`attached`](Unit::attached)): a database queue attaches the slot its `Tx` takes the
    /// unit's transaction from. One value per unit; it does not change what the unit is (ids,
    /// payload, count, stamp and headers alone are compared and shown).
    pub fn with_attached<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.attachment = Attachment(Some(value));
        self
    }

    /// What the transport [attached](Unit::with_attached), if it is a `T`.
    pub fn attached<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.attachment.0.clone()?.downcast().ok()
    }
}
