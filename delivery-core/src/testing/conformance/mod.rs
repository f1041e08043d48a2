//! The transport conformance suite: the behaviours every [`Source`](crate::Source) must show under the consumer
//! runtime, run against a real mechanism through a small [`Fixture`]. The in-memory broker passes
//! it; so must every transport (RabbitMQ, Redis Streams, NATS, Kafka), unchanged.
//!
//! Each check uses its own queue (a name derived from the check and the fixture's prefix), so
//! checks can run against a shared server and a failed run leaves nothing that breaks the next.
//!
//! | check | rule |
//! |---|---|
//! | [`acks_after_the_effect`] | 1 |
//! | [`returns_a_failed_unit`] | 1 |
//! | [`bounds_redelivery_by_the_mechanisms_count`] | 2 |
//! | [`dead_letters_poison_directly_and_intact`] | 2 |
//! | [`operates_the_dead_letter`] | 2 |
//! | [`redrives_an_edited_unit`] | 2, 3 |
//! | `operates_the_dead_letter_in_the_console` (run on its own, with a [`WebConsole`]) | 2, 3 |
//! | [`a_second_delivery_changes_nothing`] | 3 |
//! | [`a_crash_between_effect_and_ack_loses_nothing`] | 1, 3 |
//! | [`a_slow_handler_runs_once`] | 1, 3 |
//! | [`a_crash_loop_reaches_the_dead_letter`] | 2 |
//! | [`a_unit_cut_short_at_shutdown_on_its_last_delivery`] | 1, 2 |
//! | [`an_older_unit_changes_nothing`] | 4 |
//! | [`a_unit_waiting_in_its_lane_is_kept_alive`] | 1, 3 |
//! | [`units_waiting_at_shutdown_are_released_after_the_stop`] | 1, 2 |
//! | [`a_shutdown_with_lanes_loses_nothing`] | 1, 3 |
//! | [`a_poison_unit_in_a_batch_isolates_itself`] (batch handlers, [`Consumer::batch`](crate::Consumer::batch)) | 1, 2 |
//! | [`a_crash_mid_batch_loses_nothing`] | 1, 3 |
//! | [`a_partial_batch_at_shutdown_runs_or_is_released`] | 1 |

mod batches;
mod fixture;
mod support;
mod units;

pub use batches::{
    a_crash_mid_batch_loses_nothing, a_partial_batch_at_shutdown_runs_or_is_released,
    a_poison_unit_in_a_batch_isolates_itself,
};
pub use fixture::{Fixture, WebConsole};
pub use units::*;

/// Runs every check against `fixture`.
pub async fn run_all<F: Fixture>(fixture: &F) {
    acks_after_the_effect(fixture).await;
    returns_a_failed_unit(fixture).await;
    bounds_redelivery_by_the_mechanisms_count(fixture).await;
    dead_letters_poison_directly_and_intact(fixture).await;
    operates_the_dead_letter(fixture).await;
    redrives_an_edited_unit(fixture).await;
    a_second_delivery_changes_nothing(fixture).await;
    a_crash_between_effect_and_ack_loses_nothing(fixture).await;
    a_slow_handler_runs_once(fixture).await;
    a_crash_loop_reaches_the_dead_letter(fixture).await;
    a_unit_cut_short_at_shutdown_on_its_last_delivery(fixture).await;
    an_older_unit_changes_nothing(fixture).await;
    a_unit_waiting_in_its_lane_is_kept_alive(fixture).await;
    units_waiting_at_shutdown_are_released_after_the_stop(fixture).await;
    a_shutdown_with_lanes_loses_nothing(fixture).await;
    a_poison_unit_in_a_batch_isolates_itself(fixture).await;
    a_crash_mid_batch_loses_nothing(fixture).await;
    a_partial_batch_at_shutdown_runs_or_is_released(fixture).await;
}
