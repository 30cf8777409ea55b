//! What the role's IAM policies let the daemon do, evaluated without AWS (`support::iam`): every
//! write reaches this cluster's groups, templates and roles, in its region, account and VPC, and
//! nothing of another cluster's (a same-name cluster in another region included), of no
//! cluster's, or of an administrator's. The same table runs on the kustomize files (their
//! placeholders filled in) and on the chart's render (`tests/chart.rs`).

use std::path::Path;

use crate::support::iam::{Decision, Policy, Request, Resource};

pub(crate) const ACCOUNT: &str = "111122223333";
/// The cluster's region and VPC; another cluster of the same name runs in `OTHER_REGION`.
pub(crate) const REGION: &str = "eu-west-1";
const OTHER_REGION: &str = "us-east-1";
pub(crate) const VPC: &str = "vpc-0a1b2c3d";
const OTHER_VPC: &str = "vpc-0e9f8a7b";
const OWNER: &str = "instancegroups.keikoproj.io/ClusterName";
const OWNER_REGION: &str = "spots-booster.io/cluster-region";
const AZ_SUSPENDED: &str = "spots-booster.io/suspended-az-rebalance";
/// The kustomize files' placeholder for the cluster's name.
pub(crate) const PLACEHOLDER: &str = "CLUSTER_NAME";
/// Their placeholders for where the cluster runs: `(placeholder, value in these tests)`.
pub(crate) const PLACE: [(&str, &str); 3] = [("AWS_REGION", REGION), ("AWS_ACCOUNT_ID", ACCOUNT), ("VPC_ID", VPC)];
/// The four files, in the order the chart's ConfigMap keys them.
pub(crate) const FILES: [&str; 4] = [
    "iam-policy.json",
    "iam-policy-instancegroups.json",
    "iam-policy-instancegroups-roles.json",
    "iam-policy-eks-managed.json",
];

/// `text` with the cluster's name and place filled in.
pub(crate) fn filled(text: &str, cluster: &str) -> String {
    PLACE.iter().fold(text.replace(PLACEHOLDER, cluster), |t, (placeholder, value)| t.replace(placeholder, value))
}

/// The policies of `manifests/`, for `cluster` in `REGION`.
pub(crate) fn manifests_for(cluster: &str) -> Policy {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    let parsed: Vec<Policy> =
        FILES.iter().map(|f| Policy::parse(&filled(&std::fs::read_to_string(dir.join(f)).unwrap(), cluster))).collect();
    Policy::union(&parsed)
}

/// Pod Identity's session tags for `cluster` in `region`.
pub(crate) fn session_of(cluster: &str, region: &str) -> [(&'static str, String); 2] {
    [
        ("eks-cluster-name", cluster.to_string()),
        ("eks-cluster-arn", format!("arn:aws:eks:{region}:{ACCOUNT}:cluster/{cluster}")),
    ]
}

fn tags(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn asg_in(region: &str, name: &str, pairs: &[(&str, &str)]) -> Resource {
    Resource::new(
        format!("arn:aws:autoscaling:{region}:{ACCOUNT}:autoScalingGroup:6d9a1c2e:autoScalingGroupName/{name}"),
        tags(pairs),
    )
}

fn asg(name: &str, pairs: &[(&str, &str)]) -> Resource {
    asg_in(REGION, name, pairs)
}

fn ec2_in(region: &str, kind: &str, pairs: &[(&str, &str)]) -> Resource {
    Resource::new(format!("arn:aws:ec2:{region}:{ACCOUNT}:{kind}"), tags(pairs))
}

fn ec2(kind: &str, pairs: &[(&str, &str)]) -> Resource {
    ec2_in(REGION, kind, pairs)
}

fn iam(kind: &str, pairs: &[(&str, &str)]) -> Resource {
    Resource::new(format!("arn:aws:iam::{ACCOUNT}:{kind}"), tags(pairs))
}

/// The groups a cluster has, by how they say whose they are.
struct Groups {
    /// Cluster Autoscaler's discovery tags (operators', eksctl's).
    autoscaler: Resource,
    /// Only the cloud provider's tag.
    kubernetes: Resource,
    /// The Auto Scaling group behind an EKS managed node group, tagged as EKS tags it.
    managed: Resource,
    /// An InstanceGroup's, as the reconciler tags it.
    instance_group: Resource,
}

fn groups_of(cluster: &str) -> Groups {
    groups_in(REGION, cluster)
}

fn groups_in(region: &str, cluster: &str) -> Groups {
    let asg = |name: &str, pairs: &[(&str, &str)]| asg_in(region, name, pairs);
    let autoscaler_key = format!("k8s.io/cluster-autoscaler/{cluster}");
    let kubernetes_key = format!("kubernetes.io/cluster/{cluster}");
    Groups {
        autoscaler: asg(
            &format!("{cluster}-spot"),
            &[(&autoscaler_key, "owned"), ("k8s.io/cluster-autoscaler/enabled", "true")],
        ),
        kubernetes: asg(&format!("{cluster}-plain"), &[(&kubernetes_key, "owned")]),
        managed: asg(
            &format!("eks-{cluster}-ng"),
            &[
                ("eks:cluster-name", cluster),
                ("eks:nodegroup-name", "ng"),
                (&autoscaler_key, "owned"),
                ("k8s.io/cluster-autoscaler/enabled", "true"),
            ],
        ),
        instance_group: asg(
            &format!("{cluster}-team-batch"),
            &[
                (OWNER, cluster),
                ("instancegroups.keikoproj.io/Namespace", "team"),
                ("instancegroups.keikoproj.io/InstanceGroup", "batch"),
                (&kubernetes_key, "owned"),
            ],
        ),
    }
}

const BOOST: [&str; 4] = [
    "autoscaling:SetDesiredCapacity",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
    "autoscaling:SuspendProcesses",
    "autoscaling:ResumeProcesses",
];

/// One row: what is asked, and whether it must be allowed.
struct Case {
    what: String,
    request: Request,
    allowed: bool,
}

fn case(what: impl Into<String>, request: Request, allowed: bool) -> Case {
    Case { what: what.into(), request, allowed }
}

/// The requests a daemon of `ours` makes, and those it must never get through, against the
/// resources of `ours`, of `theirs`, and of no cluster. `by_tag_key` says whether the policy can
/// reach groups that name the cluster only in a tag key (not with Pod Identity's shared role).
fn table(ours: &str, theirs: &str, by_tag_key: bool) -> Vec<Case> {
    let (mine, other) = (groups_of(ours), groups_of(theirs));
    let untagged = asg("someones", &[("team", "data")]);
    let ca_enabled_only = asg("anyones", &[("k8s.io/cluster-autoscaler/enabled", "true")]);
    let mut cases = Vec::new();

    for action in BOOST {
        for (name, group, allowed) in [
            ("this cluster's Cluster Autoscaler group", &mine.autoscaler, by_tag_key),
            ("this cluster's kubernetes.io/cluster group", &mine.kubernetes, by_tag_key),
            // EKS owns its size: the booster holds such groups, and the policy denies it.
            ("this cluster's EKS managed node group", &mine.managed, false),
            ("this cluster's InstanceGroup group", &mine.instance_group, true),
            ("another cluster's Cluster Autoscaler group", &other.autoscaler, false),
            ("another cluster's kubernetes.io/cluster group", &other.kubernetes, false),
            ("another cluster's EKS managed node group", &other.managed, false),
            ("another cluster's InstanceGroup group", &other.instance_group, false),
            ("an untagged group", &untagged, false),
            ("a group tagged only k8s.io/cluster-autoscaler/enabled", &ca_enabled_only, false),
        ] {
            cases.push(case(format!("{action} on {name}"), Request::new(action, vec![group.clone()]), allowed));
        }
        // A cluster of the same name in another region of the account: its groups carry the
        // same tags (EKS names are unique per region only).
        let twin = groups_in(OTHER_REGION, ours);
        for (name, group) in [
            ("the same-name cluster's Cluster Autoscaler group in another region", &twin.autoscaler),
            ("the same-name cluster's kubernetes.io/cluster group in another region", &twin.kubernetes),
            ("the same-name cluster's InstanceGroup group in another region", &twin.instance_group),
        ] {
            cases.push(case(format!("{action} on {name}"), Request::new(action, vec![group.clone()]), false));
        }
    }

    // Tags on boosted groups: the AZRebalance record only, naming this cluster.
    let tag = |group: &Resource, pairs: &[(&str, &str)]| {
        Request::new("autoscaling:CreateOrUpdateTags", vec![group.clone()]).tagging(pairs)
    };
    let untag = |group: &Resource, pairs: &[(&str, &str)]| {
        Request::new("autoscaling:DeleteTags", vec![group.clone()]).tagging(pairs)
    };
    cases.extend([
        case(
            "the AZRebalance record on this cluster's group",
            tag(&mine.kubernetes, &[(AZ_SUSPENDED, ours)]),
            by_tag_key,
        ),
        case("its removal", untag(&mine.kubernetes, &[(AZ_SUSPENDED, ours)]), by_tag_key),
        case(
            "the AZRebalance record on its InstanceGroup's group",
            tag(&mine.instance_group, &[(AZ_SUSPENDED, ours)]),
            true,
        ),
        case("the AZRebalance record on another cluster's", tag(&other.kubernetes, &[(AZ_SUSPENDED, ours)]), false),
        case("its removal from another cluster's", untag(&other.kubernetes, &[(AZ_SUSPENDED, theirs)]), false),
        case("an AZRebalance record naming another cluster", tag(&mine.kubernetes, &[(AZ_SUSPENDED, theirs)]), false),
        case("the AZRebalance record on an EKS managed node group", tag(&mine.managed, &[(AZ_SUSPENDED, ours)]), false),
        case(
            "any other tag on a boosted group",
            tag(&mine.kubernetes, &[("k8s.io/cluster-autoscaler/enabled", "true")]),
            false,
        ),
        case("claiming an untagged group", tag(&untagged, &[(OWNER, ours)]), false),
        case("claiming another cluster's group", tag(&other.autoscaler, &[(OWNER, ours)]), false),
        case("claiming a Cluster Autoscaler group", tag(&ca_enabled_only, &[(OWNER, ours)]), false),
        case(
            "claiming this cluster's own managed group for an InstanceGroup",
            tag(&mine.managed, &[(OWNER, ours)]),
            false,
        ),
        case("a user tag on its InstanceGroup's group", tag(&mine.instance_group, &[("team", "ml")]), true),
        case("handing its group to another cluster", tag(&mine.instance_group, &[(OWNER, theirs)]), false),
        case("a user tag on another's InstanceGroup group", tag(&other.instance_group, &[("team", "ml")]), false),
        case("removing a user tag of its own", untag(&mine.instance_group, &[("team", "")]), true),
        case("removing its group's ownership tag", untag(&mine.instance_group, &[(OWNER, ours)]), false),
    ]);

    // InstanceGroups: creation carries the ownership tag (the new group's tags are the request's,
    // as AWS's own CreateAutoScalingGroup examples with autoscaling:ResourceTag show).
    let creating = |owner: Option<&str>| {
        let mut pairs = vec![("instancegroups.keikoproj.io/Namespace", "team")];
        if let Some(o) = owner {
            pairs.push((OWNER, o));
        }
        let group = asg("new-group", &pairs);
        (
            Request::new("autoscaling:CreateAutoScalingGroup", vec![group.clone()]).tagging(&pairs),
            Request::new("autoscaling:CreateOrUpdateTags", vec![group]).tagging(&pairs),
        )
    };
    let (create, tag_on_create) = creating(Some(ours));
    cases.push(case("creating an InstanceGroup's group", create, true));
    cases.push(case("tagging it as it is created", tag_on_create, true));
    let (create, _) = creating(Some(theirs));
    cases.push(case("creating a group for another cluster", create, false));
    let (create, _) = creating(None);
    cases.push(case("creating a group without its ownership tag", create, false));
    let (mut create, _) = creating(Some(ours));
    create.resources = vec![asg_in(OTHER_REGION, "new-group", &[])];
    cases.push(case("creating an InstanceGroup's group in another region", create, false));
    let (create, _) = creating(Some(ours));
    cases.push(case(
        "creating a group from a launch configuration",
        create.with("autoscaling:LaunchConfigurationName", &["any-config"]),
        false,
    ));
    cases.push(case(
        "switching its group to a launch configuration",
        Request::new("autoscaling:UpdateAutoScalingGroup", vec![mine.instance_group.clone()])
            .with("autoscaling:LaunchConfigurationName", &["any-config"]),
        false,
    ));
    let twin = groups_in(OTHER_REGION, ours);
    for action in
        ["autoscaling:UpdateAutoScalingGroup", "autoscaling:DeleteAutoScalingGroup", "autoscaling:PutWarmPool"]
    {
        cases.push(case(
            format!("{action} on its InstanceGroup's group"),
            Request::new(action, vec![mine.instance_group.clone()]),
            true,
        ));
        cases.push(case(
            format!("{action} on another's"),
            Request::new(action, vec![other.instance_group.clone()]),
            false,
        ));
        cases.push(case(
            format!("{action} on a Cluster Autoscaler group of its own"),
            Request::new(action, vec![mine.autoscaler.clone()]),
            false,
        ));
        cases.push(case(
            format!("{action} on the same-name cluster's InstanceGroup group in another region"),
            Request::new(action, vec![twin.instance_group.clone()]),
            false,
        ));
    }

    // Launch templates.
    let template = |owner: &str| ec2("launch-template/lt-0abc", &[(OWNER, owner)]);
    let twin_template = |owner: &str| ec2_in(OTHER_REGION, "launch-template/lt-0abc", &[(OWNER, owner)]);
    cases.extend([
        case(
            "creating a launch template for this cluster",
            Request::new("ec2:CreateLaunchTemplate", vec![ec2("launch-template/*", &[])]).tagging(&[(OWNER, ours)]),
            true,
        ),
        case(
            "creating one for another",
            Request::new("ec2:CreateLaunchTemplate", vec![ec2("launch-template/*", &[])]).tagging(&[(OWNER, theirs)]),
            false,
        ),
        case(
            "tagging a template as it is created",
            Request::new("ec2:CreateTags", vec![template(ours)])
                .with("ec2:CreateAction", &["CreateLaunchTemplate"])
                .tagging(&[(OWNER, ours)]),
            true,
        ),
        case(
            "tagging an existing template",
            Request::new("ec2:CreateTags", vec![ec2("launch-template/lt-9", &[])]).tagging(&[(OWNER, ours)]),
            false,
        ),
        case(
            "a new version of its template",
            Request::new("ec2:CreateLaunchTemplateVersion", vec![template(ours)]),
            true,
        ),
        case(
            "a new version of another's",
            Request::new("ec2:CreateLaunchTemplateVersion", vec![template(theirs)]),
            false,
        ),
        case("deleting another's template", Request::new("ec2:DeleteLaunchTemplate", vec![template(theirs)]), false),
        case(
            "a new version of the same-name cluster's template in another region",
            Request::new("ec2:CreateLaunchTemplateVersion", vec![twin_template(ours)]),
            false,
        ),
        case(
            "deleting the same-name cluster's template in another region",
            Request::new("ec2:DeleteLaunchTemplate", vec![twin_template(ours)]),
            false,
        ),
        case(
            "creating a launch template in another region",
            Request::new("ec2:CreateLaunchTemplate", vec![ec2_in(OTHER_REGION, "launch-template/*", &[])])
                .tagging(&[(OWNER, ours)]),
            false,
        ),
    ]);
    // RunInstances as Auto Scaling checks it against the caller when a group is created or
    // changed: the template, and the subnet and security group in their VPC.
    let launch_in = |region: &str, vpc: (&str, &str), from: Option<Resource>| {
        let vpc_arn = |v: &str| format!("arn:aws:ec2:{region}:{ACCOUNT}:vpc/{v}");
        let mut resources: Vec<Resource> =
            ["instance/*", "volume/*", "network-interface/*"].iter().map(|k| ec2_in(region, k, &[])).collect();
        resources.push(ec2_in(region, "subnet/subnet-1", &[]).keyed("ec2:Vpc", &vpc_arn(vpc.0)));
        resources.push(ec2_in(region, "security-group/sg-1", &[]).keyed("ec2:Vpc", &vpc_arn(vpc.1)));
        resources.push(Resource::new(format!("arn:aws:ec2:{region}::image/ami-1"), tags(&[])));
        let mut request = Request::new("ec2:RunInstances", resources);
        if let Some(t) = from {
            let arn = t.arn.clone();
            request = request.with("ec2:LaunchTemplate", &[&arn]);
            request.resources.push(t);
        }
        request
    };
    let launch = |from: Option<Resource>| launch_in(REGION, (VPC, VPC), from);
    cases.extend([
        case("launching from its template", launch(Some(template(ours))), true),
        case("launching from another cluster's template", launch(Some(template(theirs))), false),
        case("launching from an untagged template", launch(Some(ec2("launch-template/lt-7", &[]))), false),
        case("launching without a template", launch(None), false),
        case(
            "launching from its template into another VPC's subnet",
            launch_in(REGION, (OTHER_VPC, VPC), Some(template(ours))),
            false,
        ),
        case(
            "launching from its template with another VPC's security group",
            launch_in(REGION, (VPC, OTHER_VPC), Some(template(ours))),
            false,
        ),
        case(
            "launching from the same-name cluster's template in another region",
            launch_in(OTHER_REGION, (VPC, VPC), Some(twin_template(ours))),
            false,
        ),
    ]);

    // Node roles.
    let role_in = |region: &str, name: &str, owner: Option<&str>| {
        let pairs: Vec<(&str, &str)> = owner.map(|o| vec![(OWNER, o), (OWNER_REGION, region)]).unwrap_or_default();
        iam(&format!("role/spots-booster/{name}"), &pairs)
    };
    let role = |name: &str, owner: Option<&str>| role_in(REGION, name, owner);
    let twin_role = role_in(OTHER_REGION, "t", Some(ours));
    let owned_by = |cluster: &str, region: &str| [(OWNER, cluster.to_string()), (OWNER_REGION, region.to_string())];
    let tag_owned = |request: Request, cluster: &str, region: &str| {
        let owner = owned_by(cluster, region);
        request.tagging(&owner.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>())
    };
    let pass = |r: Resource, to: &str| Request::new("iam:PassRole", vec![r]).with("iam:PassedToService", &[to]);
    let node_defaults = "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy";
    cases.extend([
        case("passing its node role to EC2", pass(role("a", Some(ours)), "ec2.amazonaws.com"), true),
        case("passing another cluster's node role", pass(role("b", Some(theirs)), "ec2.amazonaws.com"), false),
        case("passing an untagged role under the path", pass(role("c", None), "ec2.amazonaws.com"), false),
        case("passing its node role to Lambda", pass(role("a", Some(ours)), "lambda.amazonaws.com"), false),
        case("passing an administrator's role", pass(iam("role/admin", &[(OWNER, ours)]), "ec2.amazonaws.com"), false),
        case(
            "creating a node role",
            tag_owned(Request::new("iam:CreateRole", vec![role("n", None)]), ours, REGION),
            true,
        ),
        case(
            "tagging it as it is created",
            tag_owned(Request::new("iam:TagRole", vec![role("n", None)]), ours, REGION),
            true,
        ),
        case(
            "creating one for another cluster",
            tag_owned(Request::new("iam:CreateRole", vec![role("n", None)]), theirs, REGION),
            false,
        ),
        case(
            "creating one for the same-name cluster in another region",
            tag_owned(Request::new("iam:CreateRole", vec![role("n", None)]), ours, OTHER_REGION),
            false,
        ),
        case(
            "creating one without its region",
            Request::new("iam:CreateRole", vec![role("n", None)]).tagging(&[(OWNER, ours)]),
            false,
        ),
        case(
            "creating a role outside its path",
            tag_owned(Request::new("iam:CreateRole", vec![iam("role/n", &[])]), ours, REGION),
            false,
        ),
        case(
            "claiming another cluster's role by tagging it",
            tag_owned(Request::new("iam:TagRole", vec![role("b", Some(theirs))]), ours, REGION),
            false,
        ),
        case(
            "claiming the same-name cluster's role of another region by tagging it",
            tag_owned(Request::new("iam:TagRole", vec![twin_role.clone()]), ours, REGION),
            false,
        ),
        case(
            "passing the same-name cluster's node role of another region",
            pass(twin_role.clone(), "ec2.amazonaws.com"),
            false,
        ),
        case("deleting it", Request::new("iam:DeleteRole", vec![twin_role.clone()]), false),
        case(
            "attaching the node defaults to it",
            Request::new("iam:AttachRolePolicy", vec![twin_role.clone()]).with("iam:PolicyARN", &[node_defaults]),
            false,
        ),
        case(
            "deleting a role of its name in another account",
            Request::new(
                "iam:DeleteRole",
                vec![Resource::new(
                    "arn:aws:iam::444455556666:role/spots-booster/a",
                    tags(&[(OWNER, ours), (OWNER_REGION, REGION)]),
                )],
            ),
            false,
        ),
        case("deleting its node role", Request::new("iam:DeleteRole", vec![role("a", Some(ours))]), true),
        case("deleting another cluster's", Request::new("iam:DeleteRole", vec![role("b", Some(theirs))]), false),
        case("deleting an untagged role under the path", Request::new("iam:DeleteRole", vec![role("c", None)]), false),
        case(
            "attaching the node defaults to its role",
            Request::new("iam:AttachRolePolicy", vec![role("a", Some(ours))]).with("iam:PolicyARN", &[node_defaults]),
            true,
        ),
        case(
            "attaching AdministratorAccess",
            Request::new("iam:AttachRolePolicy", vec![role("a", Some(ours))])
                .with("iam:PolicyARN", &["arn:aws:iam::aws:policy/AdministratorAccess"]),
            false,
        ),
        case(
            "attaching the node defaults to another cluster's role",
            Request::new("iam:AttachRolePolicy", vec![role("b", Some(theirs))]).with("iam:PolicyARN", &[node_defaults]),
            false,
        ),
    ]);

    // EKS managed node groups (the eks-managed provisioner): created in this cluster carrying the
    // ownership tag, then changed, tagged and deleted only while they carry it.
    let cluster_in =
        |region: &str, name: &str| Resource::new(format!("arn:aws:eks:{region}:{ACCOUNT}:cluster/{name}"), tags(&[]));
    let cluster = |name: &str| cluster_in(REGION, name);
    let node_group_in = |region: &str, cluster: &str, owner: Option<&str>| {
        let pairs: Vec<(&str, &str)> = owner.map(|o| vec![(OWNER, o)]).unwrap_or_default();
        Resource::new(
            format!("arn:aws:eks:{region}:{ACCOUNT}:nodegroup/{cluster}/{cluster}-team-batch/0ac5"),
            tags(&pairs),
        )
    };
    let node_group = |cluster: &str, owner: Option<&str>| node_group_in(REGION, cluster, owner);
    let create =
        |c: &str, owner: &str| Request::new("eks:CreateNodegroup", vec![cluster(c)]).tagging(&[(OWNER, owner)]);
    cases.extend([
        case("creating a node group in this cluster", create(ours, ours), true),
        case(
            "creating one in the same-name cluster of another region",
            Request::new("eks:CreateNodegroup", vec![cluster_in(OTHER_REGION, ours)]).tagging(&[(OWNER, ours)]),
            false,
        ),
        case(
            "passing the same-name cluster's node role of another region to EKS",
            pass(twin_role.clone(), "eks.amazonaws.com"),
            false,
        ),
        case("creating one in another cluster", create(theirs, theirs), false),
        case("creating one in this cluster tagged for another", create(ours, theirs), false),
        case(
            "creating one without its ownership tag",
            Request::new("eks:CreateNodegroup", vec![cluster(ours)]).tagging(&[("team", "batch")]),
            false,
        ),
        case(
            "tagging its node group",
            Request::new("eks:TagResource", vec![node_group(ours, Some(ours))]).tagging(&[("team", "ml")]),
            true,
        ),
        case(
            "handing its node group to another cluster",
            Request::new("eks:TagResource", vec![node_group(ours, Some(ours))]).tagging(&[(OWNER, theirs)]),
            false,
        ),
        case(
            "claiming an operator's node group",
            Request::new("eks:TagResource", vec![node_group(ours, None)]).tagging(&[(OWNER, ours)]),
            false,
        ),
        case(
            "removing a user tag of its node group",
            Request::new("eks:UntagResource", vec![node_group(ours, Some(ours))]).tagging(&[("team", "")]),
            true,
        ),
        case(
            "removing its node group's ownership tag",
            Request::new("eks:UntagResource", vec![node_group(ours, Some(ours))]).tagging(&[(OWNER, "")]),
            false,
        ),
        case("passing its node role to EKS", pass(role("a", Some(ours)), "eks.amazonaws.com"), true),
        case("passing another cluster's node role to EKS", pass(role("b", Some(theirs)), "eks.amazonaws.com"), false),
    ]);
    for action in ["eks:UpdateNodegroupConfig", "eks:UpdateNodegroupVersion", "eks:DeleteNodegroup"] {
        for (what, group, allowed) in [
            ("its node group", node_group(ours, Some(ours)), true),
            ("an operator's node group in this cluster", node_group(ours, None), false),
            ("a node group of this cluster tagged for another", node_group(ours, Some(theirs)), false),
            ("another cluster's node group", node_group(theirs, Some(theirs)), false),
            (
                "the same-name cluster's node group in another region",
                node_group_in(OTHER_REGION, ours, Some(ours)),
                false,
            ),
        ] {
            cases.push(case(format!("{action} on {what}"), Request::new(action, vec![group]), allowed));
        }
    }

    // Reads reach everything (Describe calls take no resource-level permission).
    for action in ["autoscaling:DescribeAutoScalingGroups", "ec2:DescribeInstances", "ec2:DescribeSpotInstanceRequests"]
    {
        cases.push(case(action, Request::new(action, vec![Resource::new("*", tags(&[]))]), true));
    }
    cases
}

/// Runs the table for `ours` against `theirs`, each request made as `principal` (Pod Identity's
/// session tags; none with IRSA); panics listing every row the policy gets wrong.
pub(crate) fn assert_scoped(policy: &Policy, ours: &str, theirs: &str, by_tag_key: bool, principal: &[(&str, &str)]) {
    let wrong: Vec<String> = table(ours, theirs, by_tag_key)
        .into_iter()
        .filter_map(|c| {
            let decision = policy.decide(&c.request.clone().made_by(principal));
            ((decision == Decision::Allowed) != c.allowed).then(|| {
                format!(
                    "{} ({}): {decision:?}, wanted {}",
                    c.what,
                    c.request.action,
                    if c.allowed { "allowed" } else { "denied" }
                )
            })
        })
        .collect();
    assert!(wrong.is_empty(), "the policy for {ours} gets {} rows wrong:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn with_irsa_the_policies_reach_this_cluster_s_resources_and_nothing_of_another_s() {
    let policy = manifests_for("blue");
    assert_scoped(&policy, "blue", "green", true, &[]);
    // The same files for the other cluster: the same rows, the other way round.
    assert_scoped(&manifests_for("green"), "green", "blue", true, &[]);
    // A name that is a prefix of another's reaches nothing of the other.
    assert_scoped(&manifests_for("blue"), "blue", "blue-2", true, &[]);
}

/// `session` as `made_by` takes it.
pub(crate) fn as_principal<'s>(session: &'s [(&'static str, String); 2]) -> [(&'static str, &'s str); 2] {
    [(session[0].0, session[0].1.as_str()), (session[1].0, session[1].1.as_str())]
}

#[test]
fn a_role_with_this_cluster_s_policies_associated_with_another_cluster_s_pods_can_do_nothing() {
    // EKS Pod Identity tags the session with the pod's cluster: blue's policies used from green,
    // and from a cluster named blue too, in another region.
    let policy = manifests_for("blue");
    let mine = groups_of("blue");
    for session in [session_of("green", REGION), session_of("blue", OTHER_REGION)] {
        for action in BOOST {
            let request = Request::new(action, vec![mine.autoscaler.clone()]).made_by(&as_principal(&session));
            assert_eq!(policy.decide(&request), Decision::ExplicitlyDenied, "{action} from {session:?}");
        }
        let read = Request::new("autoscaling:DescribeAutoScalingGroups", vec![mine.autoscaler.clone()]);
        assert_eq!(policy.decide(&read.made_by(&as_principal(&session))), Decision::ExplicitlyDenied);
    }
    // Associated with its own cluster, all is as with IRSA.
    assert_scoped(&policy, "blue", "green", true, &as_principal(&session_of("blue", REGION)));
}

/// Every write's resources name the account and, but for IAM's global ones, the region: a
/// wildcard there would reach a same-name cluster elsewhere.
#[test]
fn every_write_resource_is_pinned_to_the_account_and_region() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    for file in FILES {
        let policy = Policy::parse(&std::fs::read_to_string(dir.join(file)).unwrap());
        for s in policy.statements().iter().filter(|s| s["Effect"] == "Allow" && s["Sid"] != "Read") {
            let Some(resources) = s.get("Resource") else {
                // A NotResource statement reaches only what a pinned launch template describes.
                assert!(
                    s["Condition"].to_string().contains("arn:aws:ec2:AWS_REGION:AWS_ACCOUNT_ID:launch-template/"),
                    "{file}: {s}"
                );
                continue;
            };
            let listed: Vec<&str> = match resources {
                serde_json::Value::String(one) => vec![one.as_str()],
                list => list.as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect(),
            };
            for arn in listed {
                let global = arn.starts_with("arn:aws:iam::");
                let pinned = arn.contains(":AWS_ACCOUNT_ID:") && (global || arn.contains(":AWS_REGION:"));
                assert!(pinned, "{file} {}: {arn} is not pinned to the account and region", s["Sid"]);
            }
        }
    }
}

#[test]
fn every_write_statement_names_the_cluster_and_each_file_fits_a_managed_policy() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    for file in FILES {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        // IAM counts a managed policy's characters without whitespace, up to 6,144; an EKS
        // cluster's name has up to 100.
        let longest = filled(&text, &"x".repeat(100)).replace(REGION, "ap-southeast-4");
        let counted = longest.chars().filter(|c| !c.is_whitespace()).count();
        assert!(counted <= 6144, "{file}: {counted} characters with a 100-character cluster name");
        let policy = Policy::parse(&text);
        for s in policy.statements() {
            let actions: Vec<&str> = match &s["Action"] {
                serde_json::Value::String(one) => vec![one.as_str()],
                list => list.as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect(),
            };
            // A Deny only narrows what the Allows grant.
            let writes = s["Effect"] == "Allow"
                && actions.iter().any(|a| !a.contains(":Describe") && !a.contains(":Get") && !a.contains(":List"));
            // RunInstances on what a launch template describes: the template is this cluster's
            // (its own statement), and the network this cluster's VPC.
            let launching =
                actions == ["ec2:RunInstances"] && s["Condition"].to_string().contains("ec2:LaunchTemplate");
            let scoped = s["Condition"].to_string().contains(PLACEHOLDER) || launching;
            assert!(!writes || scoped, "{file}: a write not scoped to the cluster: {s}");
        }
    }
}
