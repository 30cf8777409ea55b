//! `inspect pools`: the pool memory (`kubectl get cm spots-booster-ledger-pools -o yaml`, the
//! ledger ConfigMap an earlier version kept it in, or the bare `data.pools.json`), one row per
//! pool with its conversion estimate and lead times.

use std::collections::BTreeSet;

use serde::Serialize;

use super::InspectError;
use crate::config::OutputFormat;
use crate::core::pool_memory::lead_time;
use crate::core::{Conversion, PoolMemory};
use crate::output::{structured, table, table_width};

/// The data key pool memory is kept under in its ConfigMap.
const POOLS_KEY: &str = "pools.json";

/// One pool as `inspect pools` shows it.
#[derive(Debug, Serialize)]
pub(crate) struct InspectedPool {
    group: String,
    instance_type: String,
    zone: String,
    recommendations: f64,
    interruptions: f64,
    followed: f64,
    not_followed: f64,
    conversion: Conversion,
    /// Median lead time, seconds, when some were seen.
    lead_p50_seconds: Option<u64>,
    /// 90th-percentile lead time, seconds.
    lead_p90_seconds: Option<u64>,
    failed_launches: f64,
}

/// Reads the ledger ConfigMap (YAML or JSON) or the bare pool memory JSON.
pub(crate) fn inspect_pools(input: &str) -> Result<Vec<InspectedPool>, InspectError> {
    let text = match serde_yaml::from_str::<serde_yaml::Value>(input) {
        Ok(serde_yaml::Value::Mapping(map)) if map.contains_key("data") || map.contains_key("kind") => {
            if let Some(kind) = map.get("kind").and_then(|k| k.as_str()).filter(|k| *k != "ConfigMap") {
                return Err(InspectError::NotPools(format!("the input is a {kind}, not the ledger ConfigMap")));
            }
            map.get("data")
                .and_then(|d| d.get(POOLS_KEY))
                .and_then(|s| s.as_str())
                .ok_or_else(|| {
                    InspectError::NotPools(format!("the ConfigMap has no data.{POOLS_KEY} (nothing learnt yet?)"))
                })?
                .to_string()
        }
        _ => input.to_string(),
    };
    let memory: PoolMemory =
        serde_json::from_str(&text).map_err(|e| InspectError::NotPools(format!("data.{POOLS_KEY}: {e}")))?;
    Ok(memory
        .pools
        .iter()
        .map(|p| {
            let pools =
                BTreeSet::from([crate::core::Pool { instance_type: p.instance_type.clone(), zone: p.zone.clone() }]);
            let only = PoolMemory { pools: vec![p.clone()], tracked: Default::default() }
                .histories(&crate::core::MemorySettings::default(), p.as_of);
            InspectedPool {
                group: p.group.to_string(),
                instance_type: p.instance_type.clone(),
                zone: p.zone.clone(),
                recommendations: p.recommendations,
                interruptions: p.interruptions,
                followed: p.converted,
                not_followed: p.lapsed,
                conversion: Conversion::of(p.converted, p.converted + p.lapsed),
                lead_p50_seconds: lead_time(&only, &p.group, &pools, 0.5, 1).map(|d| d.as_secs()),
                lead_p90_seconds: lead_time(&only, &p.group, &pools, 0.9, 1).map(|d| d.as_secs()),
                failed_launches: p.failed_launches.values().sum(),
            }
        })
        .collect())
}

/// Renders the pools.
pub(crate) fn render_pools(pools: &[InspectedPool], output: OutputFormat) -> String {
    let Some(width) = table_width(output) else { return structured(&pools, output == OutputFormat::Yaml) };
    let header = [
        "GROUP",
        "TYPE",
        "ZONE",
        "RECOMMENDED",
        "INTERRUPTED",
        "FOLLOWED",
        "CONVERSION (90%)",
        "LEAD P50/P90",
        "FAILED",
    ];
    let secs = |s: Option<u64>| s.map_or("-".to_string(), |s| format!("{}m", s / 60));
    let rows: Vec<Vec<String>> = pools
        .iter()
        .map(|p| {
            let c = &p.conversion;
            vec![
                p.group.clone(),
                p.instance_type.clone(),
                p.zone.clone(),
                format!("{:.1}", p.recommendations),
                format!("{:.1}", p.interruptions),
                format!("{:.1}/{:.1}", p.followed, p.followed + p.not_followed),
                format!("{:.2} ({:.2}-{:.2})", c.estimate, c.low, c.high),
                format!("{}/{}", secs(p.lead_p50_seconds), secs(p.lead_p90_seconds)),
                format!("{:.1}", p.failed_launches),
            ]
        })
        .collect();
    table(&header, &rows, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMORY: &str = r#"{"pools":[{"group":"spot-a","instance_type":"m5.large","zone":"us-east-1a",
        "recommendations":20,"interruptions":6,"converted":5,"lapsed":15,"lead_seconds":[1200,1800,3600],
        "failed_launches":{"InsufficientInstanceCapacity":2},"as_of":0}],"tracked":{}}"#;

    #[test]
    fn the_ledger_config_map_shows_each_pool_with_its_conversion_and_lead_times() {
        let cm = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: spots-booster-ledger}}\ndata:\n  pools.json: '{}'\n",
            MEMORY.replace('\n', " ")
        );
        let pools = inspect_pools(&cm).unwrap();
        assert_eq!(pools.len(), 1);
        assert_eq!((pools[0].lead_p50_seconds, pools[0].lead_p90_seconds), (Some(1800), Some(3600)));
        let table = render_pools(&pools, OutputFormat::Table);
        assert!(table.contains("spot-a") && table.contains("5.0/20.0") && table.contains("0.27"), "{table}");
        assert_eq!(inspect_pools(MEMORY).unwrap().len(), 1, "the bare JSON reads too");
    }

    #[test]
    fn another_object_or_a_config_map_without_pools_is_refused_naming_it() {
        let err = inspect_pools("kind: Node\nmetadata: {name: n1}\n").unwrap_err().to_string();
        assert!(err.contains("Node"), "{err}");
        let err = inspect_pools("kind: ConfigMap\ndata: {ledger.json: '{}'}\n").unwrap_err().to_string();
        assert!(err.contains("pools.json"), "{err}");
    }
}
