//! The `InstanceGroup` custom resource (`instancemgr.keikoproj.io/v1alpha1`), field for field
//! compatible with keikoproj instance-manager so existing YAML keeps working. The schema is as
//! permissive as upstream's: every check runs in [`super::validate`], where a failure names the
//! field instead of being rejected by the API server with a generic message.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Finalizer that holds deletion until the AWS resources are gone (upstream's name).
pub const FINALIZER: &str = "finalizer.instancegroups.keikoproj.io";

/// The longest string the API server accepts in a spec field that names no limit of its own:
/// above every identifier, name, tag and label AWS or Kubernetes allows, so upstream YAML keeps
/// applying, while a tenant's object stays small for every replica that caches it.
pub(crate) const SPEC_STRING_MAX: u32 = 1024;

/// The longest ARN (IAM's own limit).
pub(crate) const ARN_MAX: u32 = 2048;

/// The longest `bootstrapArguments`: a kubelet command line with many labels and taints.
pub(crate) const BOOTSTRAP_ARGUMENTS_MAX: u32 = 16 * 1024;

/// The longest embedded document (a user-data stage, a `crd` strategy template): well above
/// EC2's 16 KiB user data, and a quarter of the rendered size the `crd` strategy allows.
pub(crate) const DOCUMENT_MAX: u32 = 64 * 1024;

/// A group of worker nodes backed by an Auto Scaling Group.
// Each printer column repeats `type_ = …`, which clippy mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "instancemgr.keikoproj.io",
    version = "v1alpha1",
    kind = "InstanceGroup",
    namespaced,
    status = "InstanceGroupStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "ig",
    doc = "A group of worker nodes backed by an Auto Scaling Group (keikoproj instance-manager compatible).",
    printcolumn(name = "State", type_ = "string", json_path = ".status.currentState"),
    printcolumn(name = "Min", type_ = "integer", json_path = ".status.currentMin"),
    printcolumn(name = "Max", type_ = "integer", json_path = ".status.currentMax"),
    printcolumn(name = "Group Name", type_ = "string", json_path = ".status.activeScalingGroupName"),
    printcolumn(name = "Provisioner", type_ = "string", json_path = ".status.provisioner"),
    printcolumn(name = "Strategy", type_ = "string", json_path = ".status.strategy"),
    printcolumn(name = "Lifecycle", type_ = "string", json_path = ".status.lifecycle"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[schemars(transform = bound_strings)]
pub struct InstanceGroupSpec {
    /// `eks`, `eks-managed` or `eks-fargate` (case-insensitive). `eks-fargate` is refused.
    #[serde(default)]
    pub provisioner: String,
    /// The self-managed node group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eks: Option<EksSpec>,
    /// The EKS managed node group (provisioner `eks-managed`).
    #[serde(rename = "eks-managed", default, skip_serializing_if = "Option::is_none")]
    pub eks_managed: Option<EksManagedSpec>,
    /// EKS Fargate profiles: accepted by the schema, rejected by the reconciler.
    #[serde(rename = "eks-fargate", default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub eks_fargate: Option<serde_json::Value>,
    /// How nodes are replaced when the launch configuration drifts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<UpgradeStrategy>,
}

/// `spec.eks`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EksSpec {
    /// ASG MinSize; also the DesiredCapacity at creation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<i64>,
    /// ASG MaxSize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<i64>,
    /// `LaunchTemplate` (the only one supported) or `LaunchConfiguration` (retired by AWS).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub scaling_configuration: Option<String>,
    /// ASG warm pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_pool: Option<WarmPoolSpec>,
    /// The node configuration.
    pub configuration: EksConfiguration,
}

/// `spec.eks-managed`: an EKS managed node group, upstream's fields plus `capacityType`,
/// `instanceTypes` and `taints`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct EksManagedSpec {
    /// The node group's minimum size; also its desired size at creation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<i64>,
    /// The node group's maximum size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<i64>,
    /// The node group's configuration.
    #[serde(default)]
    pub configuration: EksManagedConfiguration,
    /// Fields this version does not know, kept by the API server so they are refused by name
    /// instead of dropped unseen.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// `spec.eks-managed.configuration`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct EksManagedConfiguration {
    /// EKS cluster name.
    #[serde(default)]
    pub cluster_name: String,
    /// Root volume size in GiB (EKS's `diskSize`; default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vol_size: Option<i64>,
    /// Instance type (with `instanceTypes`, the first choice).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_type: String,
    /// More instance types, for spot: EKS spreads the group over them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    /// `ON_DEMAND` (default) or `SPOT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    /// Node labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// Node taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// An existing node role's ARN to use instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = ARN_MAX))]
    pub node_role: Option<String>,
    /// Extra managed policies (names or ARNs) for a created role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = ARN_MAX)))]
    pub managed_policies: Vec<String>,
    /// Security groups allowed to reach the nodes over SSH (with `keyPairName`), ids or `Name`
    /// tag values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
    /// EC2 key pair for SSH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_pair_name: Option<String>,
    /// Node group tags, as `{key, value}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<BTreeMap<String, String>>,
    /// Subnet ids or `Name` tag values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    /// EKS AMI type, such as `AL2023_x86_64_STANDARD` or `BOTTLEROCKET_ARM_64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_type: Option<String>,
    /// EKS-optimised AMI release version (default: the latest for `version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_version: Option<String>,
    /// Kubernetes version (default: the cluster's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Fields this version does not know, refused by name.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// `spec.eks.warmPool`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolSpec {
    /// Instances kept warm at least.
    #[serde(default)]
    pub min_size: i64,
    /// Most prepared instances; -1 means the ASG's max.
    #[serde(default)]
    pub max_size: i64,
}

/// `spec.eks.configuration`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EksConfiguration {
    /// EKS cluster name.
    #[serde(default)]
    pub cluster_name: String,
    /// AMI id (`ami-…`).
    #[serde(default)]
    pub image: String,
    /// Primary instance type.
    #[serde(default)]
    pub instance_type: String,
    /// Subnet ids or `Name` tag values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    /// Security group ids or `Name` tag values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
    /// EC2 key pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_pair_name: Option<String>,
    /// EBS block devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<NodeVolume>,
    /// ASG processes to suspend, or `All`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspend_processes: Vec<String>,
    /// ASG group metrics, or `all`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics_collection: Vec<String>,
    /// Extra kubelet flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = BOOTSTRAP_ARGUMENTS_MAX))]
    pub bootstrap_arguments: Option<String>,
    /// Max pods and container runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_options: Option<BootstrapOptions>,
    /// Spot bid; on a launch template it becomes spot market options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_price: Option<String>,
    /// Extra ASG tags, propagated at launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<BTreeMap<String, String>>,
    /// Launch-template tag specifications.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tag_specifications: Vec<TagSpecification>,
    /// Node labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Userdata stages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_data: Vec<UserDataStage>,
    /// Existing node role to use instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_name: Option<String>,
    /// Existing instance profile to use instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile_name: Option<String>,
    /// Extra managed policies (names or ARNs) for a created role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = ARN_MAX)))]
    pub managed_policies: Vec<String>,
    /// ASG lifecycle hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lifecycle_hooks: Vec<LifecycleHookSpec>,
    /// Spot/on-demand mix over several instance types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_instances_policy: Option<MixedInstancesPolicySpec>,
    /// Dedicated-host licence ARNs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = ARN_MAX)))]
    pub license_specifications: Vec<String>,
    /// EC2 placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,
    /// IMDS settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptions>,
}

/// One EBS block device.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeVolume {
    /// Device name, such as `/dev/xvda`.
    pub name: String,
    /// gp2, gp3, io1, io2, sc1 or st1.
    #[serde(rename = "type")]
    pub volume_type: String,
    /// Size in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Delete with the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Encrypt the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Restore from this snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// Format and mount the volume at boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_options: Option<MountOptions>,
}

/// `volumes[].mountOptions`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MountOptions {
    /// `xfs` or `ext4`.
    #[serde(default)]
    pub file_system: String,
    /// Mount point.
    #[serde(default)]
    pub mount: String,
    /// Add an fstab entry (upstream's spelling; default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistance: Option<bool>,
}

/// `bootstrapOptions`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapOptions {
    /// kubelet max pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i64>,
    /// `containerd` or `dockerd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
}

/// `tagSpecifications[]`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TagSpecification {
    /// instance, volume, network-interface or spot-instances-request.
    pub resource_type: String,
    /// Tags as `{key, value}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<BTreeMap<String, String>>,
}

/// A node taint.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: String,
}

/// `userData[]`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
pub struct UserDataStage {
    /// Name, the merge key of the boundaries.
    #[serde(default)]
    pub name: String,
    /// PreBootstrap, PostBootstrap or NodeConfigYaml.
    pub stage: String,
    /// Plain text or base64.
    #[schemars(length(max = DOCUMENT_MAX))]
    pub data: String,
}

/// `lifecycleHooks[]`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHookSpec {
    /// Hook name.
    pub name: String,
    /// `launch` or `terminate`.
    pub lifecycle: String,
    /// `abandon` (default) or `continue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_result: Option<String>,
    /// Seconds before the default result applies (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout: Option<i64>,
    /// Notification target ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = ARN_MAX))]
    pub notification_arn: Option<String>,
    /// Role ARN allowed to publish to the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = ARN_MAX))]
    pub role_arn: Option<String>,
    /// Metadata passed with the notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

/// `mixedInstancesPolicy`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MixedInstancesPolicySpec {
    /// `CapacityOptimized` (default), `PriceCapacityOptimized`, `CapacityOptimizedPrioritized`
    /// (the instance types' order is their priority) or `LowestPrice`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Turn the ASG's Capacity Rebalance on: Auto Scaling launches a replacement for a spot
    /// instance with a rebalance recommendation itself, and the booster holds the group (unless
    /// `--boost-capacity-rebalance-groups`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_rebalance: Option<bool>,
    /// Spot pools (1–20), with LowestPrice only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_pools: Option<i64>,
    /// On-demand base capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_capacity: Option<i64>,
    /// Percent spot above the base: an int or `"NN%"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_ratio: Option<IntOrString>,
    /// Override instance types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<InstanceTypeSpec>,
    /// `SubFamilyFlexible`: not supported here (rejected with a clear status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_pool: Option<String>,
}

/// `instanceTypes[]`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
pub struct InstanceTypeSpec {
    /// Instance type.
    #[serde(rename = "type")]
    pub instance_type: String,
    /// Capacity weight (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
}

/// `placement`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// Availability zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// Host resource group ARN (tenancy `host` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = ARN_MAX))]
    pub host_resource_group_arn: Option<String>,
    /// default, dedicated or host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenancy: Option<String>,
}

/// `metadataOptions`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// `enabled` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<String>,
    /// `required` or `optional`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<String>,
    /// 1–64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_put_hop_limit: Option<i64>,
}

/// `spec.strategy`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStrategy {
    /// `rollingUpdate` (default), `crd` or `managed`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub strategy_type: Option<String>,
    /// Rolling update settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateStrategy>,
    /// Custom-resource strategy settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crd: Option<CrdStrategy>,
}

/// `strategy.rollingUpdate`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateStrategy {
    /// Nodes replaced at once: an int or `"NN%"` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

/// `strategy.crd`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrdStrategy {
    /// Plural, or `<plural>.<group>`.
    #[serde(default)]
    pub crd_name: String,
    /// The custom resource, templated with `{{ .InstanceGroup... }}`.
    #[serde(default)]
    #[schemars(length(max = DOCUMENT_MAX))]
    pub spec: String,
    /// Dotted path to the status string.
    #[serde(rename = "statusJSONPath", default)]
    pub status_json_path: String,
    /// Status value meaning done.
    #[serde(default)]
    pub status_success_string: String,
    /// Status value meaning failed.
    #[serde(default)]
    pub status_failure_string: String,
    /// forbid (default), allow or replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_policy: Option<String>,
    /// Retries after a failure (default 3; -1 forever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i64>,
}

/// An integer or a string such as `"30%"` (Kubernetes' int-or-string).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum IntOrString {
    /// A plain number.
    Int(i64),
    /// A string, usually a percentage.
    String(String),
}

impl JsonSchema for IntOrString {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IntOrString".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "x-kubernetes-int-or-string": true
        })
    }
}

/// Gives every string of the spec schema that has no `maxLength` of its own [`SPEC_STRING_MAX`],
/// so the API server refuses an oversized field before any replica caches it. Int-or-string
/// fields keep none: Kubernetes forbids a `maxLength` beside `x-kubernetes-int-or-string`.
fn bound_strings(schema: &mut schemars::Schema) {
    let is_string = match schema.get("type") {
        Some(serde_json::Value::String(t)) => t == "string",
        Some(serde_json::Value::Array(types)) => types.iter().any(|t| t == "string"),
        _ => false,
    };
    if is_string && schema.get("maxLength").is_none() {
        schema.insert("maxLength".into(), SPEC_STRING_MAX.into());
    }
    schemars::transform::transform_subschemas(&mut bound_strings, schema);
}

fn free_form(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// `status`, with upstream's field names so tools reading it keep working.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceGroupStatus {
    /// Reconcile state, such as `Ready` or `Error`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_state: String,
    /// MinSize set on the ASG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_min: Option<i64>,
    /// MaxSize set on the ASG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_max: Option<i64>,
    /// ASG name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub active_scaling_group_name: String,
    /// Launch template name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub active_launch_template_name: String,
    /// Latest launch template version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_template_version: String,
    /// Node role ARN.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nodes_instance_role_arn: String,
    /// `normal`, `spot` or `mixed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lifecycle: String,
    /// Hash of the applied `instance-manager` ConfigMap.
    #[serde(rename = "configMD5", default, skip_serializing_if = "String::is_empty")]
    pub config_md5: String,
    /// Echo of the strategy type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy: String,
    /// Echo of the provisioner.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provisioner: String,
    /// Custom resources submitted by the `crd` strategy.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy_resource_name: String,
    /// Their namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy_resource_namespace: String,
    /// `crd` retries used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy_retry_count: Option<i64>,
    /// Conditions: `NodesReady`, and `Reconciled` with reason, message and time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A status condition, with the reason, message and time upstream omits.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `NodesReady` or `Reconciled`.
    #[serde(rename = "type")]
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase cause.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// What happened, naming the field at fault.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
}

/// Renders the CRD as YAML: what `spots-booster crd` prints and `manifests/crd.yaml` holds.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let crd = InstanceGroup::crd();
    serde_yaml::to_string(&crd).expect("a CRD always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_example_round_trips_without_losing_fields() {
        let yaml = include_str!("../testdata/batch-spot.yaml");
        let ig: InstanceGroup = serde_yaml::from_str(yaml).expect("the reference example parses");
        let config = &ig.spec.eks.as_ref().unwrap().configuration;
        assert_eq!(config.instance_type, "m6i.2xlarge");
        assert_eq!(config.mixed_instances_policy.as_ref().unwrap().spot_ratio, Some(IntOrString::String("90%".into())));
        assert_eq!(config.volumes[0].iops, Some(3000));
        assert_eq!(config.taints[0].effect, "NoSchedule");
        let again: InstanceGroup = serde_yaml::from_str(&serde_yaml::to_string(&ig).unwrap()).unwrap();
        assert_eq!(again, ig);
        let original: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        let written = serde_json::to_value(&ig).unwrap();
        assert_eq!(written["spec"], original["spec"], "no spec field is dropped or renamed");
    }

    #[test]
    fn the_crd_has_upstream_names_columns_and_status_subresource() {
        use kube::CustomResourceExt;
        let crd = InstanceGroup::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("instancegroups.instancemgr.keikoproj.io"));
        assert_eq!(crd.spec.names.short_names, Some(vec!["ig".to_string()]));
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("State", ".status.currentState"),
                ("Min", ".status.currentMin"),
                ("Max", ".status.currentMax"),
                ("Group Name", ".status.activeScalingGroupName"),
                ("Provisioner", ".status.provisioner"),
                ("Strategy", ".status.strategy"),
                ("Lifecycle", ".status.lifecycle"),
                ("Age", ".metadata.creationTimestamp"),
            ]
        );
        let yaml = crd_yaml();
        assert!(yaml.contains("x-kubernetes-int-or-string: true"), "spotRatio/maxUnavailable are int-or-string");
    }

    /// Every string field under `spec`, by its dotted path (`[]` an item, `{}` a map value), with
    /// its `maxLength` (None when it has none).
    fn spec_strings() -> BTreeMap<String, Option<u64>> {
        fn walk(path: &str, schema: &serde_json::Value, out: &mut BTreeMap<String, Option<u64>>) {
            if schema.get("type").and_then(|t| t.as_str()) == Some("string") {
                out.insert(path.to_string(), schema.get("maxLength").and_then(|m| m.as_u64()));
            }
            for (name, property) in schema.get("properties").and_then(|p| p.as_object()).into_iter().flatten() {
                walk(&format!("{path}.{name}"), property, out);
            }
            if let Some(items) = schema.get("items") {
                walk(&format!("{path}[]"), items, out);
            }
            if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
                walk(&format!("{path}{{}}"), values, out);
            }
        }
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(InstanceGroup::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let mut out = BTreeMap::new();
        walk("spec", spec, &mut out);
        out
    }

    #[test]
    fn every_spec_string_has_a_max_length_the_largest_only_where_a_document_goes() {
        let strings = spec_strings();
        assert!(strings.len() > 50, "the walk found the spec's strings: {strings:?}");
        let unbounded: Vec<_> = strings.iter().filter(|(_, max)| max.is_none()).map(|(p, _)| p).collect();
        assert!(unbounded.is_empty(), "strings without maxLength: {unbounded:?}");
        let max =
            |path: &str| strings.get(path).copied().flatten().unwrap_or_else(|| panic!("{path} not in {strings:?}"));
        assert_eq!(max("spec.strategy.crd.spec"), u64::from(DOCUMENT_MAX));
        assert_eq!(max("spec.eks.configuration.userData[].data"), u64::from(DOCUMENT_MAX));
        assert_eq!(max("spec.eks.configuration.managedPolicies[]"), u64::from(ARN_MAX));
        assert_eq!(max("spec.eks.configuration.lifecycleHooks[].roleArn"), u64::from(ARN_MAX));
        assert_eq!(max("spec.eks.configuration.labels{}"), u64::from(SPEC_STRING_MAX));
        assert_eq!(max("spec.eks.configuration.tags[]{}"), u64::from(SPEC_STRING_MAX));
        assert_eq!(max("spec.provisioner"), u64::from(SPEC_STRING_MAX));
        let documents = strings.values().filter(|m| **m == Some(u64::from(DOCUMENT_MAX))).count();
        assert_eq!(documents, 2, "only the crd template and user data may hold a document");
    }
}
