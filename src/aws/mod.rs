//! The ports implemented on the AWS SDK: Auto Scaling for boosts and terminations, EC2 for
//! instance facts. Configuration comes from the standard chain (environment, profile, IRSA web
//! identity) plus `--aws-region` and `--aws-endpoint-url` (emulators, VPC endpoints).

pub mod autoscaling;
pub mod calls;
pub mod ec2;
pub mod errors;
mod group_writes;
mod recent_sizes;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use clap::{ArgAction, Args};

pub use autoscaling::AwsAutoScaling;
pub use calls::{CallStats, OperationStats};
pub use ec2::AwsInstances;

use crate::ports::TagFilter;

/// Every AWS API action the adapters call, as IAM names it: the one list `manifests/iam-policy.json`
/// is checked against.
pub const IAM_ACTIONS: &[&str] = &[
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    // A boost's launches that failed (no capacity in the pool, a broken configuration).
    "autoscaling:DescribeScalingActivities",
    "autoscaling:SetDesiredCapacity",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
    // `--suspend-az-rebalance` (SuspendProcesses, ResumeProcesses and the tag recording it) is
    // covered by the InstanceGroup reconciler's actions below.
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceStatus",
    // Whether EC2 itself reports a spot interruption: what confirms a notice.
    "ec2:DescribeSpotInstanceRequests",
    // InstanceGroup reconciliation (`instancegroup::aws`).
    "autoscaling:CreateAutoScalingGroup",
    "autoscaling:UpdateAutoScalingGroup",
    "autoscaling:DeleteAutoScalingGroup",
    "autoscaling:CreateOrUpdateTags",
    "autoscaling:DeleteTags",
    "autoscaling:SuspendProcesses",
    "autoscaling:ResumeProcesses",
    "autoscaling:EnableMetricsCollection",
    "autoscaling:DisableMetricsCollection",
    "autoscaling:DescribeLifecycleHooks",
    "autoscaling:PutLifecycleHook",
    "autoscaling:DeleteLifecycleHook",
    "autoscaling:DescribeWarmPool",
    "autoscaling:PutWarmPool",
    "autoscaling:DeleteWarmPool",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:CreateLaunchTemplate",
    // Tagging the template at creation is a CreateTags call as far as IAM is concerned.
    "ec2:CreateTags",
    "ec2:CreateLaunchTemplateVersion",
    "ec2:DeleteLaunchTemplate",
    // Auto Scaling launches from our templates with the caller's rights.
    "ec2:RunInstances",
    "eks:DescribeCluster",
    "iam:GetRole",
    "iam:CreateRole",
    "iam:DeleteRole",
    "iam:ListAttachedRolePolicies",
    "iam:AttachRolePolicy",
    "iam:DetachRolePolicy",
    "iam:GetInstanceProfile",
    "iam:CreateInstanceProfile",
    // Creating a role or profile with its tags is a TagRole or TagInstanceProfile call too, as
    // far as IAM is concerned.
    "iam:TagRole",
    "iam:TagInstanceProfile",
    "iam:DeleteInstanceProfile",
    "iam:AddRoleToInstanceProfile",
    "iam:RemoveRoleFromInstanceProfile",
    "iam:PassRole",
    // The `eks-managed` provisioner (`manifests/iam-policy-eks-managed.json`).
    "eks:DescribeNodegroup",
    "eks:CreateNodegroup",
    "eks:UpdateNodegroupConfig",
    "eks:UpdateNodegroupVersion",
    "eks:DeleteNodegroup",
    "eks:TagResource",
    "eks:UntagResource",
];

/// AWS flags. Every flag also reads its `SPOTS_BOOSTER_` environment variable.
#[derive(Debug, Clone, Args)]
pub struct AwsArgs {
    /// AWS region; defaults to the standard chain (AWS_REGION, profile, instance metadata).
    #[arg(long, env = "SPOTS_BOOSTER_AWS_REGION")]
    pub(crate) aws_region: Option<String>,
    /// Send AWS calls to this endpoint instead (an emulator such as moto, or a VPC endpoint).
    #[arg(long, env = "SPOTS_BOOSTER_AWS_ENDPOINT_URL")]
    pub(crate) aws_endpoint_url: Option<String>,
    /// Most attempts per AWS call (adaptive retry with client-side rate limiting).
    #[arg(long, env = "SPOTS_BOOSTER_AWS_MAX_ATTEMPTS", default_value_t = 5)]
    pub(crate) aws_max_attempts: u32,
    /// Longest one AWS operation may take, retries included: a stalled answer never freezes a
    /// worker.
    #[arg(long, env = "SPOTS_BOOSTER_AWS_OPERATION_TIMEOUT", default_value = "30s", value_parser = duration)]
    pub(crate) aws_operation_timeout: Duration,
    /// Longest one attempt of an AWS operation may take before it is retried.
    #[arg(long, env = "SPOTS_BOOSTER_AWS_ATTEMPT_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub(crate) aws_attempt_timeout: Duration,
    /// How long a read of a group's sizes serves as the guard of a boost written to it (see
    /// docs/design.md): a wave's later groups are written without a read of their own, and a
    /// Cluster Autoscaler scale-up within that window before a boost is overwritten by it. 0
    /// reads every group right before its write.
    #[arg(long, env = "SPOTS_BOOSTER_GUARD_READ_MAX_AGE", default_value = "1s", value_parser = duration)]
    pub(crate) guard_read_max_age: Duration,
    /// The cluster's name, as its Auto Scaling groups' tags carry it (`kubernetes.io/cluster/<name>`,
    /// `k8s.io/cluster-autoscaler/<name>` or `eks:cluster-name=<name>`): nothing of a group whose
    /// tags name another cluster, or none, is ever touched, whatever a Node claims.
    #[arg(long, env = "SPOTS_BOOSTER_CLUSTER_NAME", value_parser = cluster_name)]
    pub(crate) cluster_name: String,
    /// Touch only groups whose tags also match: KEY or KEY=VALUE, repeatable (all must match).
    /// The matching groups are described at start-up; the others' nodes are never boosted,
    /// drained nor terminated.
    #[arg(long, env = "SPOTS_BOOSTER_ASG_TAG_FILTER", value_delimiter = ',')]
    pub(crate) asg_tag_filter: Vec<TagFilter>,
    /// Read everything, write nothing: boosts and terminations are logged and counted, never sent.
    #[arg(long, env = "SPOTS_BOOSTER_DRY_RUN", action = ArgAction::Set, num_args = 0..=1,
          default_value_t = false, default_missing_value = "true")]
    pub(crate) dry_run: bool,
}

fn duration(s: &str) -> Result<Duration, String> {
    crate::units::parse_duration(s).map_err(|e| e.to_string())
}

/// An EKS cluster name: 1–100 letters, digits, `-` and `_`, starting with a letter or digit (so
/// it can stand in a tag key and an IAM condition unchanged).
fn cluster_name(s: &str) -> Result<String, String> {
    let ok = (1..=100).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not a cluster name: 1-100 letters, digits, '-' and '_', starting with a letter or digit"))
    }
}

/// Loads the shared SDK configuration with adaptive retries and operation and attempt timeouts.
pub async fn load_sdk_config(args: &AwsArgs) -> SdkConfig {
    let timeouts = TimeoutConfig::builder()
        .operation_timeout(args.aws_operation_timeout)
        .operation_attempt_timeout(args.aws_attempt_timeout)
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::adaptive().with_max_attempts(args.aws_max_attempts.max(1)))
        .timeout_config(timeouts);
    if let Some(region) = &args.aws_region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &args.aws_endpoint_url {
        loader = loader.endpoint_url(url.clone());
    }
    loader.load().await
}

/// The AWS ports, sharing one set of call statistics.
#[derive(Debug, Clone)]
pub struct AwsPorts {
    /// Auto Scaling, with the EC2 lookups the booster needs beside it.
    pub autoscaling: AwsAutoScaling,
    /// Calls, attempts, errors and throttles per operation.
    pub stats: CallStats,
}

impl AwsPorts {
    /// Builds both clients from one SDK configuration.
    pub fn new(config: &SdkConfig, dry_run: bool) -> AwsPorts {
        let stats = CallStats::default();
        let autoscaling = aws_sdk_autoscaling::Client::from_conf(
            aws_sdk_autoscaling::config::Builder::from(config).interceptor(stats.interceptor()).build(),
        );
        let ec2 = aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::config::Builder::from(config).interceptor(stats.interceptor()).build(),
        );
        AwsPorts {
            autoscaling: AwsAutoScaling::new(
                autoscaling,
                AwsInstances::new(ec2, stats.clone()),
                stats.clone(),
                dry_run,
            ),
            stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_config::retry::RetryMode;

    use super::*;

    #[test]
    fn a_cluster_name_is_what_eks_allows() {
        for good in ["prod", "prod-euw1", "a_b", "0x", &"c".repeat(100)] {
            assert_eq!(cluster_name(good).as_deref(), Ok(good));
        }
        for bad in ["", "-prod", "prod/x", "prod*", "a b", &"c".repeat(101)] {
            let err = cluster_name(bad).unwrap_err();
            assert!(err.contains("is not a cluster name"), "{bad:?}: {err}");
        }
    }

    #[tokio::test]
    async fn the_sdk_config_retries_adaptively_and_honours_the_flags() {
        let args = AwsArgs {
            aws_region: Some("eu-central-1".into()),
            aws_endpoint_url: Some("http://127.0.0.1:1".into()),
            aws_max_attempts: 7,
            aws_operation_timeout: Duration::from_secs(3),
            aws_attempt_timeout: Duration::from_secs(1),
            guard_read_max_age: Duration::from_secs(1),
            cluster_name: "test-cluster".into(),
            asg_tag_filter: Vec::new(),
            dry_run: false,
        };
        let config = load_sdk_config(&args).await;
        let retry = config.retry_config().expect("a retry config");
        assert_eq!((retry.mode(), retry.max_attempts()), (RetryMode::Adaptive, 7));
        assert_eq!(config.region().map(|r| r.as_ref()), Some("eu-central-1"));
        assert_eq!(config.endpoint_url(), Some("http://127.0.0.1:1"));
        let timeouts = config.timeout_config().expect("a timeout config");
        assert_eq!(timeouts.operation_timeout(), Some(Duration::from_secs(3)));
        assert_eq!(timeouts.operation_attempt_timeout(), Some(Duration::from_secs(1)));
    }

    #[tokio::test]
    async fn a_stalled_aws_answer_ends_at_the_operation_timeout() {
        use crate::ports::AutoScaling;
        // A loopback server that accepts and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let args = AwsArgs {
            aws_region: Some("us-east-1".into()),
            aws_endpoint_url: Some(url),
            aws_max_attempts: 2,
            aws_operation_timeout: Duration::from_millis(600),
            aws_attempt_timeout: Duration::from_millis(200),
            guard_read_max_age: Duration::ZERO,
            cluster_name: "test-cluster".into(),
            asg_tag_filter: Vec::new(),
            dry_run: false,
        };
        let credentials = aws_sdk_autoscaling::config::Credentials::new("test", "test", None, None, "test");
        let config = load_sdk_config(&args)
            .await
            .into_builder()
            .credentials_provider(aws_sdk_autoscaling::config::SharedCredentialsProvider::new(credentials))
            .build();
        let ports = AwsPorts::new(&config, false);
        let started = std::time::Instant::now();
        let answer = ports.autoscaling.describe_groups(&["g".into()]).await;
        assert!(answer.is_err(), "{answer:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    }
}
