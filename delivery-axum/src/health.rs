//! Serving health over axum (feature `axum`): `200` when every component is up, `503` otherwise,
//! with the snapshots as JSON either way.

use ::axum::Json;
use ::axum::http::StatusCode;
use ::axum::response::{IntoResponse, Response};
use ::axum::routing::MethodRouter;
use serde::Serialize;

use delivery_core::health::{Health, HealthSnapshot};

/// Several components' health at one moment, as [`route`] serves it.
///
/// ```json
/// {"healthy": true, "components": [{"component": "consumer", "name": "orders", ...}]}
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HealthReport {
    /// Every component is up.
    pub healthy: bool,
    /// Each component's snapshot.
    pub components: Vec<HealthSnapshot>,
}

impl HealthReport {
    /// The report of `healths` now.
    pub fn of<'a>(healths: impl IntoIterator<Item = &'a Health>) -> Self {
        let components: Vec<HealthSnapshot> = healths.into_iter().map(Health::snapshot).collect();
        HealthReport {
            healthy: components.iter().all(|c| c.healthy),
            components,
        }
    }
}

impl IntoResponse for HealthReport {
    fn into_response(self) -> Response {
        answer(self.healthy, self)
    }
}

/// `200` when healthy, `503` otherwise, with `body` as JSON either way.
fn answer(healthy: bool, body: impl Serialize) -> Response {
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// A `GET` route answering with the [`HealthReport`] of `healths`: `200` when every one is up,
/// `503` otherwise (a readiness probe takes the process out of rotation), with the JSON body
/// either way.
///
/// ```
/// use axum::Router;
/// use delivery_core::health::{Component, Health};
///
/// let consumer = Health::new(Component::Consumer, "orders"); // `consumer.health()` in a service
/// let relay = Health::new(Component::Relay, "delivery_outbox"); // `relayer.health()`
/// let app: Router = Router::new().route("/health", delivery_axum::health::route([consumer, relay]));
/// ```
pub fn route<S>(healths: impl IntoIterator<Item = Health>) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    let healths: std::sync::Arc<[Health]> = healths.into_iter().collect();
    ::axum::routing::get(move || {
        let healths = healths.clone();
        async move { HealthReport::of(healths.iter()) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use delivery_core::health::{Component, Health};

    #[test]
    fn the_report_is_200_only_when_every_component_is_up() {
        // Neither has run yet: not up.
        let consumer = Health::new(Component::Consumer, "orders");
        let relay = Health::new(Component::Relay, "delivery_outbox");
        let report = HealthReport::of([&consumer, &relay]);
        assert!(!report.healthy);
        assert_eq!(report.components.len(), 2);
        assert_eq!(
            report.into_response().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );

        let report = HealthReport::of([]);
        assert!(report.healthy);
        assert_eq!(report.into_response().status(), StatusCode::OK);
    }
}
