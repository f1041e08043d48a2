//! The dead-letter stamp: what a consumer records beside a unit it dead-letters — why, the detail,
//! where it came from, on which delivery — as headers. Written and read back by every transport
//! through this one codec.

use std::borrow::Cow;

use crate::disposition::{DeadLetterReason, ReasonKind};
use crate::headers::{
    DEAD_LETTER_DELIVERY_COUNT, DEAD_LETTER_DETAIL, DEAD_LETTER_REASON, DEAD_LETTER_SOURCE,
};
use crate::unit::DeliveryCount;

/// Why, from where and on which delivery a unit was dead-lettered, as its headers carry it:
/// [`DEAD_LETTER_REASON`], [`DEAD_LETTER_DETAIL`], [`DEAD_LETTER_SOURCE`] and
/// [`DEAD_LETTER_DELIVERY_COUNT`], each a text value. A transport writes
/// [`headers`](Self::headers) beside the unit's own, and reads them back with
/// [`read`](Self::read); each field is `None` where the unit does not carry it (a unit the broker
/// dead-lettered on its own, a transport that records its source otherwise).
///
/// ```
/// use delivery_core::dead_letter::DeadLetterStamp;
/// use delivery_core::disposition::{DeadLetterReason, ReasonKind};
/// use delivery_core::unit::DeliveryCount;
///
/// let reason = DeadLetterReason::new(ReasonKind::Rejected, "no such sku");
/// let stamp = DeadLetterStamp::new(&reason, Some("orders"), DeliveryCount::new(3));
/// let headers = stamp.headers();
/// let read = DeadLetterStamp::read(|name| {
///     headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str().into())
/// });
/// assert_eq!(read, stamp);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterStamp {
    /// Why it was dead-lettered.
    pub reason: Option<ReasonKind>,
    /// The detail of the reason (the decode error, the handler's error).
    pub detail: Option<String>,
    /// Where it came from: the queue, stream or topic a redrive sends it back to.
    pub source: Option<String>,
    /// The delivery on which it was dead-lettered.
    pub delivery_count: Option<DeliveryCount>,
}

impl DeadLetterStamp {
    /// The stamp of a unit dead-lettered for `reason` on its `delivery_count`th delivery, from
    /// `source` (`None`: the transport records where it came from in headers of its own).
    pub fn new(
        reason: &DeadLetterReason,
        source: Option<&str>,
        delivery_count: DeliveryCount,
    ) -> Self {
        DeadLetterStamp {
            reason: Some(reason.kind()),
            detail: Some(reason.detail().to_owned()),
            source: source.map(str::to_owned),
            delivery_count: Some(delivery_count),
        }
    }

    /// The stamp as headers, name and text value, in a fixed order; a field that is `None` is not
    /// written.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        [
            (
                DEAD_LETTER_REASON,
                self.reason.map(|r| r.as_str().to_owned()),
            ),
            (DEAD_LETTER_DETAIL, self.detail.clone()),
            (DEAD_LETTER_SOURCE, self.source.clone()),
            (
                DEAD_LETTER_DELIVERY_COUNT,
                self.delivery_count.map(|c| c.get().to_string()),
            ),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
        .collect()
    }

    /// The stamp a unit's headers carry, `header(name)` answering the (last) value of the header
    /// `name` as text. A reason this crate does not know, or a count that is not a number, reads
    /// as `None`.
    pub fn read<'a>(header: impl Fn(&str) -> Option<Cow<'a, str>>) -> Self {
        DeadLetterStamp {
            reason: header(DEAD_LETTER_REASON).and_then(|r| ReasonKind::parse(&r)),
            detail: header(DEAD_LETTER_DETAIL).map(Cow::into_owned),
            source: header(DEAD_LETTER_SOURCE).map(Cow::into_owned),
            delivery_count: header(DEAD_LETTER_DELIVERY_COUNT)
                .and_then(|c| c.trim().parse::<u32>().ok())
                .map(DeliveryCount::new),
        }
    }
}
