//! EKS Pod Identity: the daemon's AWS configuration (`load_sdk_config`, as `run` builds it) takes
//! its credentials from the container credentials provider, the way the EKS Pod Identity Agent
//! serves them (`AWS_CONTAINER_CREDENTIALS_FULL_URI` plus the token in
//! `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`), and signs its Auto Scaling calls with them.
//!
//! A loopback server plays the agent (it refuses a request without the token), another plays
//! Auto Scaling and records each request's signature. The environment is the process's, so this
//! binary holds this one test.

use std::sync::{Arc, Mutex};

use clap::Parser;
use spots_booster::aws::{load_sdk_config, AwsPorts};
use spots_booster::config::{Cli, Command};
use spots_booster::ports::AutoScaling;

#[path = "support/aws_loopback.rs"]
mod support;

const TOKEN: &str = "pod-identity-token-4f2a";
const ACCESS_KEY: &str = "ASIAPODIDENTITYEXAMPL";
const SESSION_TOKEN: &str = "session-token-from-the-pod-identity-agent";

const NO_GROUPS: &str = r#"<DescribeAutoScalingGroupsResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><DescribeAutoScalingGroupsResult><AutoScalingGroups/></DescribeAutoScalingGroupsResult><ResponseMetadata><RequestId>5d3c9d6e-0000-4000-8000-000000000000</RequestId></ResponseMetadata></DescribeAutoScalingGroupsResponse>"#;

fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test]
async fn aws_calls_are_signed_with_the_credentials_the_pod_identity_agent_serves() {
    let agent_asked: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let asked = agent_asked.clone();
    let agent = support::serve_with_head(move |head, _| {
        let token = header(&head, "authorization").map(String::from);
        let authorized = token.as_deref() == Some(TOKEN);
        asked.lock().unwrap().push(token);
        if !authorized {
            return ("401 Unauthorized", r#"{"message":"bad token"}"#.into());
        }
        let expiration = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(6);
        let credentials = serde_json::json!({
            "AccessKeyId": ACCESS_KEY,
            "SecretAccessKey": "pod-identity-secret",
            "Token": SESSION_TOKEN,
            "AccountId": "111122223333",
            "Expiration": expiration.to_string(),
        });
        ("200 OK", credentials.to_string())
    });

    let signed: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = signed.clone();
    let autoscaling = support::serve_with_head(move |head, _| {
        seen.lock().unwrap().push(head);
        ("200 OK", NO_GROUPS.into())
    });

    let dir = std::env::temp_dir().join(format!("spots-booster-pod-identity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("eks-pod-identity-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    // The pod's environment as EKS sets it with a Pod Identity association, and nothing else that
    // the default chain would try first (static keys, profiles, web identity) or after (IMDS).
    for unset in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ] {
        std::env::remove_var(unset);
    }
    std::env::set_var("AWS_CONFIG_FILE", dir.join("no-config"));
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", dir.join("no-credentials"));
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    std::env::set_var("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{agent}/v1/credentials"));
    std::env::set_var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &token_file);

    let cli = Cli::try_parse_from([
        "spots-booster",
        "run",
        "--cluster-name",
        "prod",
        "--aws-region",
        "eu-west-1",
        "--aws-endpoint-url",
        &autoscaling,
    ])
    .unwrap();
    let Command::Run(args) = cli.command else { panic!("run") };
    let aws = AwsPorts::new(&load_sdk_config(&args.aws).await, false);
    let groups = aws.autoscaling.describe_groups(&["spot-a".into()]).await.expect("described with Pod Identity");
    assert!(groups.is_empty());

    assert_eq!(
        agent_asked.lock().unwrap().first().cloned().flatten().as_deref(),
        Some(TOKEN),
        "the agent was asked with the token file's content"
    );
    let requests = signed.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let authorization = header(&requests[0], "authorization").expect("a signed request");
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256") && authorization.contains(&format!("Credential={ACCESS_KEY}/")),
        "signed with the agent's key: {authorization}"
    );
    assert!(authorization.contains("/eu-west-1/autoscaling/aws4_request"), "{authorization}");
    assert_eq!(header(&requests[0], "x-amz-security-token"), Some(SESSION_TOKEN), "with its session token");
    let _ = std::fs::remove_dir_all(&dir);
}
