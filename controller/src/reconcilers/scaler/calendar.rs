//! A Scaler's holidays from the ConfigMap its spec names (`spec.excludeCalendar`), read with
//! the controller's rights (the webhook asked its author's to get it).
use k8s_openapi::api::core::v1::ConfigMap;
use kubesteer_api::scaler::calendar::{holidays_in, CalendarRef, Holiday};
use kubesteer_api::scaler::schedule::Instant;

use super::*;

/// The calendar's holidays around `now` in `tz`; Ok(Err(why)) when it cannot be read (no such
/// ConfigMap or key, not allowed, not an iCalendar file), Err on an apiserver failure a retry
/// may mend.
pub(super) async fn read_holidays(
    ctx: &ScalerContext,
    ns: &str,
    calendar: &CalendarRef,
    tz: kubesteer_api::scaler::calendar::Tz,
    now: Instant,
) -> Result<std::result::Result<Vec<Holiday>, String>> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let name = &calendar.name;
    let map = match api.get_opt(name).await {
        Ok(Some(map)) => map,
        Ok(None) => {
            return Ok(Err(format!(
                "ConfigMap {ns}/{name} of spec.excludeCalendar does not exist"
            )))
        }
        Err(e) if is_status(&e, 403) => {
            return Ok(Err(format!(
            "ConfigMap {ns}/{name} of spec.excludeCalendar may not be read by the controller: {e}"
        )))
        }
        Err(e) => return Err(e.into()),
    };
    Ok(holidays_in(map.data.as_ref(), ns, calendar, tz, now))
}
