//! Incidents: one row per Alertmanager alert (deduplicated by its fingerprint, following it
//! from firing to resolved and back) or per incident opened by hand. Incidents are not
//! owner-scoped: every signed-in user may read them. Ids have the exact shape the chat
//! agent's router relies on: `incident_` then `[A-Za-z0-9][A-Za-z0-9-]{0,63}`.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::secrets;
use super::text_enum::text_enum;
use super::{Result, Store, StoreError};

/// Most incidents one `incidents` call returns.
pub const MAX_INCIDENTS_PER_READ: u32 = 1000;
/// Longest incident title, in characters; an alert's longer summary is cut to this.
pub const MAX_INCIDENT_TITLE_CHARS: usize = 200;
/// Longest service or severity name, in characters.
pub const MAX_INCIDENT_FIELD_CHARS: usize = 100;
/// Longest Alertmanager fingerprint accepted.
pub const MAX_FINGERPRINT_CHARS: usize = 128;
/// Longest id suffix after the prefix's underscore.
const MAX_ID_SUFFIX_CHARS: usize = 64;

/// Where an incident stands: `firing`/`resolved` follow an alert, `open`/`closed` are for
/// incidents opened by hand (any of the four may be set by hand).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IncidentStatus {
    Firing,
    Resolved,
    Open,
    Closed,
}

text_enum!(IncidentStatus, "incident status", {
    Firing => "firing",
    Resolved => "resolved",
    Open => "open",
    Closed => "closed",
});

/// An alert's state as Alertmanager reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    Firing,
    Resolved,
}

text_enum!(AlertStatus, "alert status", {
    Firing => "firing",
    Resolved => "resolved",
});

impl From<AlertStatus> for IncidentStatus {
    fn from(status: AlertStatus) -> Self {
        match status {
            AlertStatus::Firing => IncidentStatus::Firing,
            AlertStatus::Resolved => IncidentStatus::Resolved,
        }
    }
}

/// One alert of an Alertmanager notification. Times are seconds since the epoch; `None`
/// when Alertmanager sent its zero time (an alert still firing has no end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertUpdate {
    pub fingerprint: String,
    pub status: AlertStatus,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: Option<i64>,
    pub ends_at: Option<i64>,
}

/// An incident opened by hand (`warden incident add`, tests, evaluation setups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewIncident {
    /// An explicit `incident_…` id, or `None` for a generated one.
    pub id: Option<String>,
    pub title: String,
    pub service: String,
    pub severity: String,
    pub status: IncidentStatus,
}

/// An incident as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Incident {
    pub id: String,
    /// The Alertmanager fingerprint of the alert behind it; `None` for one opened by hand.
    pub fingerprint: Option<String>,
    pub title: String,
    pub service: String,
    pub severity: String,
    pub status: IncidentStatus,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: Option<i64>,
    pub ends_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Incidents on the store.
pub trait Incidents {
    /// Records an alert: a new incident for a fingerprint not seen before (`true`), else
    /// the existing one updated to the alert's status, times, labels and annotations
    /// (`false`). A resolved alert that fires again reopens its incident.
    fn upsert_alert(&self, alert: &AlertUpdate, now: i64) -> Result<(Incident, bool)>;
    /// Opens an incident by hand; `Conflict` if the explicit id is taken.
    fn add_incident(&self, new: &NewIncident, now: i64) -> Result<Incident>;
    /// One incident; `NotFound` if there is none with this id.
    fn incident(&self, id: &str) -> Result<Incident>;
    /// Incidents, optionally of one status, most recently updated first, at most
    /// `min(limit, MAX_INCIDENTS_PER_READ)`.
    fn incidents(&self, status: Option<IncidentStatus>, limit: u32) -> Result<Vec<Incident>>;
}

/// Whether `text` is an incident id: `incident_` and `[A-Za-z0-9][A-Za-z0-9-]{0,63}`.
pub fn is_incident_id(text: &str) -> bool {
    has_id_shape(text, "incident")
}

/// Whether `text` is `prefix` + `_` + `[A-Za-z0-9][A-Za-z0-9-]{0,63}` (no further `_`).
pub(super) fn has_id_shape(text: &str, prefix: &str) -> bool {
    let Some(suffix) = text
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
    else {
        return false;
    };
    let mut bytes = suffix.bytes();
    let starts_well = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
    starts_well
        && suffix.len() <= MAX_ID_SUFFIX_CHARS
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Incidents for Store {
    fn upsert_alert(&self, alert: &AlertUpdate, now: i64) -> Result<(Incident, bool)> {
        let fingerprint = alert.fingerprint.trim();
        if fingerprint.is_empty() || fingerprint.chars().count() > MAX_FINGERPRINT_CHARS {
            return Err(StoreError::Invalid(format!(
                "an alert needs a fingerprint of 1 to {MAX_FINGERPRINT_CHARS} characters"
            )));
        }
        let fields = AlertFields::of(alert);
        let labels = to_json_text(&alert.labels)?;
        let annotations = to_json_text(&alert.annotations)?;
        let status = IncidentStatus::from(alert.status);
        let fresh_id = secrets::new_id("incident")?;
        self.write(|t| {
            let existing: Option<String> = t
                .query_row(
                    "SELECT id FROM incidents WHERE fingerprint = ?1",
                    [fingerprint],
                    |r| r.get(0),
                )
                .optional()?;
            let created = existing.is_none();
            let id = existing.unwrap_or(fresh_id);
            if created {
                t.execute(
                    "INSERT INTO incidents (id, fingerprint, title, service, severity, status,
                         labels, annotations, starts_at, ends_at, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)",
                    params![
                        id,
                        fingerprint,
                        fields.title,
                        fields.service,
                        fields.severity,
                        status,
                        labels,
                        annotations,
                        alert.starts_at,
                        alert.ends_at,
                        now
                    ],
                )?;
            } else {
                t.execute(
                    "UPDATE incidents SET title = ?2, service = ?3, severity = ?4, status = ?5,
                         labels = ?6, annotations = ?7, starts_at = ?8, ends_at = ?9,
                         updated_at = ?10
                     WHERE id = ?1",
                    params![
                        id,
                        fields.title,
                        fields.service,
                        fields.severity,
                        status,
                        labels,
                        annotations,
                        alert.starts_at,
                        alert.ends_at,
                        now
                    ],
                )?;
            }
            Ok((incident_in(t, &id)?, created))
        })
    }

    fn add_incident(&self, new: &NewIncident, now: i64) -> Result<Incident> {
        let id = match &new.id {
            Some(id) if is_incident_id(id) => id.clone(),
            Some(id) => {
                return Err(StoreError::Invalid(format!(
                    "`{id}` is not an incident id (incident_ then letters, digits and \
                     dashes, at most {MAX_ID_SUFFIX_CHARS})"
                )))
            }
            None => secrets::new_id("incident")?,
        };
        let title = required_text("title", &new.title, MAX_INCIDENT_TITLE_CHARS)?;
        let service = required_text("service", &new.service, MAX_INCIDENT_FIELD_CHARS)?;
        let severity = required_text("severity", &new.severity, MAX_INCIDENT_FIELD_CHARS)?;
        self.write(|t| {
            let taken: Option<i64> = t
                .query_row("SELECT 1 FROM incidents WHERE id = ?1", [&id], |r| r.get(0))
                .optional()?;
            if taken.is_some() {
                return Err(StoreError::Conflict(format!(
                    "incident `{id}` already exists"
                )));
            }
            t.execute(
                "INSERT INTO incidents (id, title, service, severity, status, labels,
                     annotations, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, '{}', '{}', ?6, ?6)",
                params![id, title, service, severity, new.status, now],
            )?;
            incident_in(t, &id)
        })
    }

    fn incident(&self, id: &str) -> Result<Incident> {
        self.read(|c| incident_in(c, id))
    }

    fn incidents(&self, status: Option<IncidentStatus>, limit: u32) -> Result<Vec<Incident>> {
        let limit = limit.min(MAX_INCIDENTS_PER_READ);
        self.read(|c| {
            let mut statement = c.prepare(&format!(
                "SELECT {INCIDENT_COLUMNS} FROM incidents
                 WHERE ?1 IS NULL OR status = ?1
                 ORDER BY updated_at DESC, rowid DESC LIMIT ?2"
            ))?;
            let rows = statement.query_map(params![status, limit], incident_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

/// The incident with this id, inside the caller's read or transaction.
pub(super) fn incident_in(c: &Connection, id: &str) -> Result<Incident> {
    c.query_row(
        &format!("SELECT {INCIDENT_COLUMNS} FROM incidents WHERE id = ?1"),
        [id],
        incident_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("incident `{id}`")))
}

/// A JSON column read into `T`; text that does not parse is a conversion error.
pub(super) fn json_column<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    index: usize,
) -> rusqlite::Result<T> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// A value as JSON text for a JSON column.
pub(super) fn to_json_text<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Invalid(format!("cannot store a value as JSON: {e}")))
}

/// The title, service and severity an alert's labels and annotations give its incident.
struct AlertFields {
    title: String,
    service: String,
    severity: String,
}

impl AlertFields {
    fn of(alert: &AlertUpdate) -> Self {
        let pick = |map: &BTreeMap<String, String>, key: &str| {
            map.get(key)
                .map(|value| value.trim())
                .filter(|value| !value.is_empty())
                .map(str::to_owned)
        };
        let title = pick(&alert.annotations, "summary")
            .or_else(|| pick(&alert.labels, "alertname"))
            .unwrap_or_else(|| format!("alert {}", alert.fingerprint.trim()));
        let service = ["service", "job", "instance"]
            .iter()
            .find_map(|key| pick(&alert.labels, key))
            .unwrap_or_else(|| "unknown".to_owned());
        let severity = pick(&alert.labels, "severity").unwrap_or_else(|| "unknown".to_owned());
        AlertFields {
            title: cut(&title, MAX_INCIDENT_TITLE_CHARS),
            service: cut(&service, MAX_INCIDENT_FIELD_CHARS),
            severity: cut(&severity, MAX_INCIDENT_FIELD_CHARS),
        }
    }
}

/// At most `max` characters of `text` (an alert's fields are cut rather than refused, so
/// no alert is lost for a long summary).
fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// `text` trimmed; `Invalid` when empty or longer than `max` characters.
fn required_text(what: &str, text: &str, max: usize) -> Result<String> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.chars().count() > max {
        return Err(StoreError::Invalid(format!(
            "an incident's {what} must be 1 to {max} characters"
        )));
    }
    Ok(trimmed.to_owned())
}

const INCIDENT_COLUMNS: &str = "id, fingerprint, title, service, severity, status, labels, \
     annotations, starts_at, ends_at, created_at, updated_at";

fn incident_from_row(row: &Row<'_>) -> rusqlite::Result<Incident> {
    Ok(Incident {
        id: row.get(0)?,
        fingerprint: row.get(1)?,
        title: row.get(2)?,
        service: row.get(3)?,
        severity: row.get(4)?,
        status: row.get(5)?,
        labels: json_column(row, 6)?,
        annotations: json_column(row, 7)?,
        starts_at: row.get(8)?,
        ends_at: row.get(9)?,
        created_at: row.get(10)?,
        updated_at: row.get(11)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        (dir, store)
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn alert(status: AlertStatus, labels: &[(&str, &str)]) -> AlertUpdate {
        AlertUpdate {
            fingerprint: "fp1".into(),
            status,
            labels: map(labels),
            annotations: map(&[("summary", "Disk almost full")]),
            starts_at: Some(100),
            ends_at: None,
        }
    }

    fn manual(id: Option<&str>) -> NewIncident {
        NewIncident {
            id: id.map(str::to_owned),
            title: " Nginx 502 ".into(),
            service: "nginx".into(),
            severity: "critical".into(),
            status: IncidentStatus::Open,
        }
    }

    #[test]
    fn an_alert_creates_then_updates_then_resolves_one_incident() {
        let (_dir, store) = store();
        let labels = [
            ("alertname", "DiskFull"),
            ("job", "node"),
            ("severity", "warning"),
        ];
        let (first, created) = store
            .upsert_alert(&alert(AlertStatus::Firing, &labels), 10)
            .unwrap();
        assert!(created);
        assert!(is_incident_id(&first.id), "{}", first.id);
        assert_eq!(
            (
                first.title.as_str(),
                first.service.as_str(),
                first.severity.as_str(),
                first.status
            ),
            (
                "Disk almost full",
                "node",
                "warning",
                IncidentStatus::Firing
            )
        );
        assert_eq!(first.fingerprint.as_deref(), Some("fp1"));
        assert_eq!(first.labels["alertname"], "DiskFull");

        let (again, created) = store
            .upsert_alert(&alert(AlertStatus::Firing, &labels), 20)
            .unwrap();
        assert!(!created);
        assert_eq!(
            (again.id.as_str(), again.created_at, again.updated_at),
            (first.id.as_str(), 10, 20)
        );

        let mut resolved = alert(AlertStatus::Resolved, &labels);
        resolved.ends_at = Some(150);
        let (done, created) = store.upsert_alert(&resolved, 30).unwrap();
        assert!(!created);
        assert_eq!(
            (done.status, done.ends_at),
            (IncidentStatus::Resolved, Some(150))
        );
        assert_eq!(store.incidents(None, 10).unwrap().len(), 1);

        let (reopened, created) = store
            .upsert_alert(&alert(AlertStatus::Firing, &labels), 40)
            .unwrap();
        assert!(!created);
        assert_eq!(
            (reopened.id, reopened.status),
            (first.id, IncidentStatus::Firing)
        );
    }

    #[test]
    fn alert_fields_fall_back_in_order() {
        let (_dir, store) = store();
        let mut bare = alert(
            AlertStatus::Firing,
            &[("alertname", "HighLoad"), ("instance", "db1:9100")],
        );
        bare.annotations.clear();
        bare.fingerprint = "fp2".into();
        let (incident, _) = store.upsert_alert(&bare, 1).unwrap();
        assert_eq!(
            (
                incident.title.as_str(),
                incident.service.as_str(),
                incident.severity.as_str()
            ),
            ("HighLoad", "db1:9100", "unknown")
        );
        let mut nothing = alert(AlertStatus::Firing, &[("service", "api"), ("job", "x")]);
        nothing.annotations = map(&[("summary", &"x".repeat(500))]);
        nothing.fingerprint = "fp3".into();
        let (incident, _) = store.upsert_alert(&nothing, 1).unwrap();
        assert_eq!(incident.service, "api");
        assert_eq!(incident.title.chars().count(), MAX_INCIDENT_TITLE_CHARS);
        let mut unnamed = alert(AlertStatus::Firing, &[]);
        unnamed.annotations.clear();
        unnamed.fingerprint = "fp4".into();
        let (incident, _) = store.upsert_alert(&unnamed, 1).unwrap();
        assert_eq!(
            (incident.title.as_str(), incident.service.as_str()),
            ("alert fp4", "unknown")
        );

        let mut blank = alert(AlertStatus::Firing, &[]);
        blank.fingerprint = " ".into();
        assert!(matches!(
            store.upsert_alert(&blank, 1),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn incidents_by_hand_take_valid_unique_ids() {
        let (_dir, store) = store();
        let made = store
            .add_incident(&manual(Some("incident_db-42")), 5)
            .unwrap();
        assert_eq!(
            (
                made.id.as_str(),
                made.title.as_str(),
                made.status,
                made.fingerprint.as_deref()
            ),
            ("incident_db-42", "Nginx 502", IncidentStatus::Open, None)
        );
        assert!(made.labels.is_empty());
        assert!(matches!(
            store.add_incident(&manual(Some("incident_db-42")), 6),
            Err(StoreError::Conflict(_))
        ));
        for bad in [
            "incident_",
            "incident_a_b",
            "incident_-a",
            "incidentx",
            "diagnostic_a",
        ] {
            assert!(
                matches!(
                    store.add_incident(&manual(Some(bad)), 6),
                    Err(StoreError::Invalid(_))
                ),
                "{bad}"
            );
        }
        let generated = store.add_incident(&manual(None), 7).unwrap();
        assert!(is_incident_id(&generated.id));
        let mut untitled = manual(None);
        untitled.title = "  ".into();
        assert!(matches!(
            store.add_incident(&untitled, 8),
            Err(StoreError::Invalid(_))
        ));

        assert_eq!(store.incident("incident_db-42").unwrap(), made);
        assert!(matches!(
            store.incident("incident_nope"),
            Err(StoreError::NotFound(_))
        ));
    }

    #[test]
    fn listing_filters_by_status_newest_first_and_caps() {
        let (_dir, store) = store();
        let mut closed = manual(Some("incident_old"));
        closed.status = IncidentStatus::Closed;
        store.add_incident(&closed, 1).unwrap();
        store
            .add_incident(&manual(Some("incident_mid")), 2)
            .unwrap();
        store
            .add_incident(&manual(Some("incident_new")), 3)
            .unwrap();
        let ids = |list: Vec<Incident>| list.into_iter().map(|i| i.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.incidents(None, 10).unwrap()),
            ["incident_new", "incident_mid", "incident_old"]
        );
        assert_eq!(ids(store.incidents(None, 1).unwrap()), ["incident_new"]);
        assert_eq!(
            ids(store.incidents(Some(IncidentStatus::Closed), 10).unwrap()),
            ["incident_old"]
        );
        assert!(store
            .incidents(Some(IncidentStatus::Firing), 10)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn id_shapes_are_exact() {
        assert!(is_incident_id("incident_a"));
        assert!(is_incident_id(&format!("incident_{}", "a".repeat(64))));
        assert!(!is_incident_id(&format!("incident_{}", "a".repeat(65))));
        assert!(is_incident_id("incident_2024-05-01-db"));
        assert!(!is_incident_id("incident_é"));
        assert!(!is_incident_id("Incident_a"));
        assert!(has_id_shape("diagnostic_x1", "diagnostic"));
    }
}
