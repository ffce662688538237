//! Unit tests of `live`: how connectors are combined behind one source.
use serde_json::json;

use super::*;

struct Fixed {
    name: &'static str,
    kinds: Vec<SourceKind>,
    answer: Result<Vec<i64>, &'static str>,
}

impl Connector for Fixed {
    fn name(&self) -> &str {
        self.name
    }
    fn provides(&self) -> &[SourceKind] {
        &self.kinds
    }
    fn records(
        &self,
        _kind: SourceKind,
        _start: Option<i64>,
        _end: Option<i64>,
    ) -> Result<Vec<SourceRecord>, String> {
        match &self.answer {
            Ok(times) => Ok(times
                .iter()
                .map(|ts| masked_record(*ts, json!({"message": "mail ops@example.com"})))
                .collect()),
            Err(message) => Err((*message).to_owned()),
        }
    }
    fn health(&self) -> Health {
        Health {
            name: self.name.to_owned(),
            kind: "fixed".to_owned(),
            ok: self.answer.is_ok(),
            detail: String::new(),
            provides: self.kinds.clone(),
        }
    }
}

fn source(connectors: Vec<Fixed>) -> LiveSource {
    LiveSource::new(
        connectors
            .into_iter()
            .map(|c| Box::new(c) as Box<dyn Connector>)
            .collect(),
    )
}

#[test]
fn kinds_without_a_connector_are_unavailable_and_records_merge_in_time_order() {
    let live = source(vec![
        Fixed {
            name: "a",
            kinds: vec![SourceKind::AppLog],
            answer: Ok(vec![30, 10]),
        },
        Fixed {
            name: "b",
            kinds: vec![SourceKind::AppLog],
            answer: Ok(vec![20]),
        },
    ]);
    assert_eq!(
        live.records(SourceKind::PgLog, None, None),
        Ok(SourceRecords::Unavailable)
    );
    let Ok(SourceRecords::Records(records)) = live.records(SourceKind::AppLog, None, None) else {
        panic!("records expected");
    };
    let times: Vec<i64> = records.iter().map(|r| r.ts).collect();
    assert_eq!(times, [10, 20, 30]);
    assert!(records.iter().all(|r| !r.raw.contains("ops@example.com")));
}

#[test]
fn one_connector_down_is_tolerated_all_down_is_an_error() {
    let partly = source(vec![
        Fixed {
            name: "a",
            kinds: vec![SourceKind::AppLog],
            answer: Err("refused"),
        },
        Fixed {
            name: "b",
            kinds: vec![SourceKind::AppLog],
            answer: Ok(vec![5]),
        },
    ]);
    assert!(matches!(
        partly.records(SourceKind::AppLog, None, None),
        Ok(SourceRecords::Records(r)) if r.len() == 1
    ));
    let down = source(vec![Fixed {
        name: "a",
        kinds: vec![SourceKind::AppLog],
        answer: Err("refused"),
    }]);
    let err = down.records(SourceKind::AppLog, None, None).err();
    assert!(err.is_some_and(|e| e.to_string().contains("a: refused")));
}
