//! `spots-booster inspect scaling-activities`: a group's scaling activities as the launch watcher
//! classifies them, from what `aws autoscaling describe-scaling-activities
//! --auto-scaling-group-name G` prints (JSON), read from a file or standard input.

use serde::{Deserialize, Serialize};

use crate::config::OutputFormat;
use crate::core::{classify, GroupName, LaunchFailure, ScalingActivity};
use crate::inspect::InspectError;
use crate::output::{structured, table, table_width};
use crate::timefmt::{format_rfc3339, parse_rfc3339};
use crate::yaml_guard::read_yaml;

/// The AWS CLI's answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CliAnswer {
    activities: Vec<CliActivity>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CliActivity {
    activity_id: String,
    auto_scaling_group_name: String,
    #[serde(default)]
    description: String,
    start_time: String,
    status_code: String,
    #[serde(default)]
    status_message: Option<String>,
}

/// One activity and what the booster makes of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct InspectedActivity {
    /// The activity as the adapter reports it.
    pub activity: ScalingActivity,
    /// A failed launch's class, when it is one.
    pub failure: Option<LaunchFailure>,
}

/// Reads the CLI's JSON (YAML too) and classifies every activity.
pub(crate) fn inspect_scaling_activities(text: &str) -> Result<Vec<InspectedActivity>, InspectError> {
    let answer: CliAnswer = read_yaml(text).map_err(|e| InspectError::NotActivities(e.to_string()))?;
    answer
        .activities
        .into_iter()
        .enumerate()
        .map(|(k, a)| {
            let started = parse_rfc3339(&a.start_time).map_err(|e| {
                InspectError::NotActivities(format!("Activities[{k}].StartTime {:?}: {e}", a.start_time))
            })?;
            let activity = ScalingActivity {
                group: GroupName::from(a.auto_scaling_group_name.as_str()),
                id: a.activity_id,
                status_code: a.status_code,
                status_message: a.status_message,
                description: a.description,
                started,
            };
            Ok(InspectedActivity { failure: classify(&activity), activity })
        })
        .collect()
}

/// Prints the activities, newest first as AWS lists them.
pub(crate) fn render_scaling_activities(activities: &[InspectedActivity], output: OutputFormat) -> String {
    let Some(width) = table_width(output) else { return structured(&activities, output == OutputFormat::Yaml) };
    let header = ["STARTED", "GROUP", "STATUS", "BOOSTER READS", "REASON"];
    let rows: Vec<Vec<String>> = activities
        .iter()
        .map(|a| {
            let (reads, reason) = match &a.failure {
                Some(LaunchFailure::Capacity { code }) => ("no capacity: falls back".to_string(), code.clone()),
                Some(LaunchFailure::Configuration { message }) => {
                    ("configuration: reported".to_string(), message.clone())
                }
                None => ("-".to_string(), a.activity.status_message.clone().unwrap_or_default()),
            };
            vec![
                format_rfc3339(a.activity.started),
                a.activity.group.to_string(),
                a.activity.status_code.clone(),
                reads,
                reason,
            ]
        })
        .collect();
    table(&header, &rows, width)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::TABLE_WIDTH;

    const ANSWER: &str = include_str!("../../tests/fixtures/scaling-activities/spot-no-capacity.json");

    #[test]
    fn the_cli_answer_is_classified_as_the_watcher_does() {
        let inspected = inspect_scaling_activities(ANSWER).unwrap();
        assert_eq!(inspected.len(), 2);
        assert_eq!(inspected[0].failure, Some(LaunchFailure::Capacity { code: "InsufficientInstanceCapacity".into() }));
        assert_eq!(inspected[1].failure, None);
        let text = render_scaling_activities(&inspected, OutputFormat::Table);
        assert!(text.contains("no capacity: falls back") && text.contains("InsufficientInstanceCapacity"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= TABLE_WIDTH), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&render_scaling_activities(&inspected, OutputFormat::Json)).unwrap();
        assert_eq!(json[0]["failure"]["class"], "capacity");
    }

    #[test]
    fn a_bad_input_names_the_field() {
        let err = inspect_scaling_activities(r#"{"Activities": [{"ActivityId": "x"}]}"#).unwrap_err().to_string();
        assert!(err.contains("AutoScalingGroupName"), "{err}");
        let bad_time = ANSWER.replace("2026-11-25T09:58:01.000Z", "yesterday");
        let err = inspect_scaling_activities(&bad_time).unwrap_err().to_string();
        assert!(err.contains("Activities[1].StartTime \"yesterday\""), "{err}");
    }
}
