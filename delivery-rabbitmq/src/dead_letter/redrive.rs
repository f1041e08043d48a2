//! The redrive: each selected unit published back to its source under a confirm, and its
//! dead-letter copy acknowledged once the broker confirmed it.

use bytes::Bytes;

use crate::codec::{self};
use crate::publish::ConfirmedPublisher;
use delivery_core::dead_letter::Selection;
use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

use super::queue::RabbitDeadLetters;

impl RabbitDeadLetters {
    /// A snapshot in which each selected unit, in the listing's order, is published back to its
    /// source — edited to `edit`, if given, under its own `message_id` — and its dead-letter copy
    /// acknowledged once the broker confirmed it. Returns the ids redriven.
    pub(super) async fn redrive_selected(
        &self,
        selection: Selection<'_>,
        edit: Option<&Bytes>,
    ) -> Result<Vec<UnitId>, TransportError> {
        let publisher = ConfirmedPublisher::new(self.connector.clone());
        let redriven = self
            .with_pass(async |pass| {
                let mut redriven = Vec::new();
                for index in 0..pass.units.len() {
                    let taken = &mut pass.units[index];
                    if !selection.contains(&taken.key.id) {
                        continue;
                    }
                    let id = taken.key.id.clone();
                    let record = self.record(taken);
                    let target = &record.source;
                    let table = taken.properties.headers().as_ref();
                    let (payload, headers, properties) = match edit {
                        None => (
                            record.unit.payload(),
                            codec::rewrite(table, []),
                            taken.properties.clone(),
                        ),
                        // An edited unit keeps its id even where it was a digest of its body.
                        Some(payload) => (
                            payload,
                            codec::rewrite_edited(table, record.unit.payload()),
                            taken.properties.clone().with_message_id(id.as_str().into()),
                        ),
                    };
                    let before = redriven.len();
                    publisher
                        .publish(target, payload, properties.with_headers(headers))
                        .await
                        .map_err(|e| {
                            TransportError::msg(
                                "redriving",
                                format!(
                                    "{id} was not moved to `{target}` and stays in the dead letter \
                                     ({before} units were redriven before it): {e}"
                                ),
                            )
                        })?;
                    pass.remove(self, index).await.map_err(|e| {
                        TransportError::msg(
                            "redriving",
                            format!(
                                "{id} was copied to `{target}` but its dead-letter copy was not \
                                 acknowledged ({e}); it is in both ({before} units were redriven \
                                 before it)"
                            ),
                        )
                    })?;
                    redriven.push(id);
                }
                Ok(redriven)
            })
            .await;
        publisher.close().await;
        redriven
    }
}
