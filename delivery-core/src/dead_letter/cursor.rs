//! Reading a [`Cursor`] back into the position a transport wrote in it.

use std::str::FromStr;

use super::api::Cursor;
use crate::transport_error::TransportError;

/// The position `cursor` holds, as the transport wrote it ([`DeadLetter::position`](super::DeadLetter::position));
/// an error naming the cursor if it is not one of this dead letter's.
pub fn parse<T: FromStr>(cursor: &Cursor) -> Result<T, TransportError> {
    cursor.as_str().parse().map_err(|_| {
        TransportError::msg(
            "listing the dead letter",
            format!("`{}` is not a cursor of this dead letter", cursor.as_str()),
        )
    })
}
