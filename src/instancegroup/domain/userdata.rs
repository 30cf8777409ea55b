//! Node userdata per OS family: bash around `/etc/eks/bootstrap.sh` (AL2), a MIME multipart with
//! nodeadm NodeConfig (AL2023), TOML settings (Bottlerocket). The output is deterministic, byte
//! for byte, because drift compares it byte-exact: any change rotates nodes.

use std::fmt::Write;

use super::design::{Bootstrap, OsFamily, VolumeMount};

/// What the nodes need to find and trust the cluster (from EKS DescribeCluster).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// Cluster name.
    pub name: String,
    /// API server URL.
    pub endpoint: String,
    /// Base64 cluster CA.
    pub(crate) certificate_authority: String,
    /// Service CIDR (IPv4), such as `10.100.0.0/16`.
    pub(crate) service_cidr: Option<String>,
    /// VPC the cluster runs in.
    pub vpc_id: Option<String>,
}

impl ClusterInfo {
    /// The cluster DNS IP: the service CIDR with its last octet set to 10, as EKS does.
    pub(crate) fn dns_ip(&self) -> Option<String> {
        let network = self.service_cidr.as_deref()?.split('/').next()?;
        let octets: Vec<&str> = network.split('.').collect();
        (octets.len() == 4).then(|| format!("{}.{}.{}.10", octets[0], octets[1], octets[2]))
    }
}

/// Renders plain-text userdata (the launch template carries its base64).
pub(crate) fn render(cluster: &ClusterInfo, bootstrap: &Bootstrap, warm_pool: bool) -> String {
    match bootstrap.os_family {
        OsFamily::AmazonLinux2 => amazon_linux_2(cluster, bootstrap, warm_pool),
        OsFamily::AmazonLinux2023 => amazon_linux_2023(cluster, bootstrap, warm_pool),
        OsFamily::Bottlerocket => bottlerocket(cluster, bootstrap),
    }
}

fn kubelet_flags(bootstrap: &Bootstrap) -> Vec<String> {
    let mut flags = Vec::new();
    let labels: Vec<String> = bootstrap.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    flags.push(format!("--node-labels={}", labels.join(",")));
    if !bootstrap.taints.is_empty() {
        flags.push(format!("--register-with-taints={}", bootstrap.taints.join(",")));
    }
    if let Some(extra) = &bootstrap.extra_args {
        flags.push(extra.trim().to_string());
    }
    flags
}

fn mount_lines(out: &mut String, mounts: &[(String, VolumeMount)]) {
    for (device, mount) in mounts {
        let _ = writeln!(out, "mkfs.{} {device}", mount.file_system);
        let _ = writeln!(out, "mkdir -p {}", mount.path);
        let _ = writeln!(out, "mount {device} {}", mount.path);
        if mount.persist {
            let _ = writeln!(out, "echo '{device} {} {} defaults 0 2' >> /etc/fstab", mount.path, mount.file_system);
        }
    }
}

// A warmed instance must not join the cluster until it leaves the warm pool.
const WARM_POOL_GUARD: &str = "TOKEN=$(curl -sX PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60')
if curl -sH \"X-aws-ec2-metadata-token: $TOKEN\" http://169.254.169.254/latest/meta-data/autoscaling/target-lifecycle-state | grep -q Warmed; then
  rm -f /var/lib/cloud/instance/sem/config_scripts_user
  exit 0
fi
";

fn amazon_linux_2(cluster: &ClusterInfo, bootstrap: &Bootstrap, warm_pool: bool) -> String {
    let mut out = String::from("#!/bin/bash\nset -o xtrace\n");
    if warm_pool {
        out.push_str(WARM_POOL_GUARD);
    }
    mount_lines(&mut out, &bootstrap.mounts);
    for script in &bootstrap.pre_bootstrap {
        out.push_str(script.trim_end());
        out.push('\n');
    }
    let mut kubelet = kubelet_flags(bootstrap);
    let _ = write!(
        out,
        "/etc/eks/bootstrap.sh {} --b64-cluster-ca {} --apiserver-endpoint {}",
        cluster.name, cluster.certificate_authority, cluster.endpoint
    );
    if let Some(ip) = cluster.dns_ip() {
        let _ = write!(out, " --dns-cluster-ip {ip}");
    }
    if let Some(runtime) = &bootstrap.container_runtime {
        let _ = write!(out, " --container-runtime {runtime}");
    }
    if let Some(max_pods) = bootstrap.max_pods {
        out.push_str(" --use-max-pods false");
        kubelet.push(format!("--max-pods={max_pods}"));
    }
    let _ = writeln!(out, " --kubelet-extra-args '{}'", kubelet.join(" "));
    for script in &bootstrap.post_bootstrap {
        out.push_str(script.trim_end());
        out.push('\n');
    }
    out
}

const BOUNDARY: &str = "//spots-booster//";

fn amazon_linux_2023(cluster: &ClusterInfo, bootstrap: &Bootstrap, warm_pool: bool) -> String {
    let mut out = format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    let mut part = |content_type: &str, body: &str| {
        let _ = write!(out, "--{BOUNDARY}\nContent-Type: {content_type}\n\n{}\n\n", body.trim_end());
    };
    let mut pre = String::from("#!/bin/bash\nset -o xtrace\n");
    if warm_pool {
        pre.push_str(WARM_POOL_GUARD);
    }
    mount_lines(&mut pre, &bootstrap.mounts);
    for script in &bootstrap.pre_bootstrap {
        pre.push_str(script.trim_end());
        pre.push('\n');
    }
    part("text/x-shellscript; charset=\"us-ascii\"", &pre);
    for document in &bootstrap.node_config {
        part("application/node.eks.aws", document);
    }
    let mut node_config = format!(
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: {}\n    apiServerEndpoint: {}\n    certificateAuthority: {}\n",
        cluster.name, cluster.endpoint, cluster.certificate_authority
    );
    if let Some(cidr) = &cluster.service_cidr {
        let _ = writeln!(node_config, "    cidr: {cidr}");
    }
    node_config.push_str("  kubelet:\n");
    if let Some(max_pods) = bootstrap.max_pods {
        let _ = writeln!(node_config, "    config:\n      maxPods: {max_pods}");
    }
    node_config.push_str("    flags:\n");
    for flag in kubelet_flags(bootstrap) {
        let _ = writeln!(node_config, "    - {}", serde_json::Value::String(flag));
    }
    part("application/node.eks.aws", &node_config);
    if !bootstrap.post_bootstrap.is_empty() {
        let mut post = String::from("#!/bin/bash\n");
        for script in &bootstrap.post_bootstrap {
            post.push_str(script.trim_end());
            post.push('\n');
        }
        part("text/x-shellscript; charset=\"us-ascii\"", &post);
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    out
}

fn toml_string(value: &str) -> String {
    // A JSON string is a valid TOML basic string for everything labels and taints can hold.
    serde_json::Value::String(value.to_string()).to_string()
}

fn bottlerocket(cluster: &ClusterInfo, bootstrap: &Bootstrap) -> String {
    let mut out = String::from("[settings.kubernetes]\n");
    let _ = writeln!(out, "api-server = {}", toml_string(&cluster.endpoint));
    let _ = writeln!(out, "cluster-certificate = {}", toml_string(&cluster.certificate_authority));
    let _ = writeln!(out, "cluster-name = {}", toml_string(&cluster.name));
    if let Some(ip) = cluster.dns_ip() {
        let _ = writeln!(out, "cluster-dns-ip = {}", toml_string(&ip));
    }
    if let Some(max_pods) = bootstrap.max_pods {
        let _ = writeln!(out, "max-pods = {max_pods}");
    }
    out.push_str("\n[settings.kubernetes.node-labels]\n");
    for (k, v) in &bootstrap.labels {
        let _ = writeln!(out, "{} = {}", toml_string(k), toml_string(v));
    }
    if !bootstrap.taints.is_empty() {
        out.push_str("\n[settings.kubernetes.node-taints]\n");
        for taint in &bootstrap.taints {
            let (key, rest) = taint.split_once('=').unwrap_or((taint, ""));
            let _ = writeln!(out, "{} = [{}]", toml_string(key), toml_string(rest));
        }
    }
    // Bottlerocket has no shell: user stages are extra TOML settings.
    for settings in bootstrap.pre_bootstrap.iter().chain(&bootstrap.post_bootstrap) {
        out.push('\n');
        out.push_str(settings.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "prod".into(),
            endpoint: "https://ABC.gr7.eu-west-1.eks.amazonaws.com".into(),
            certificate_authority: "Q0E=".into(),
            service_cidr: Some("172.20.0.0/16".into()),
            vpc_id: Some("vpc-1".into()),
        }
    }

    fn bootstrap(os_family: OsFamily) -> Bootstrap {
        Bootstrap {
            os_family,
            labels: BTreeMap::from([
                ("node.kubernetes.io/role".into(), "batch".into()),
                ("team".into(), "data".into()),
            ]),
            taints: vec!["dedicated=batch:NoSchedule".into()],
            extra_args: Some("--kube-reserved=cpu=250m".into()),
            max_pods: Some(58),
            container_runtime: Some("containerd".into()),
            pre_bootstrap: vec!["sysctl -w vm.max_map_count=262144".into()],
            post_bootstrap: vec!["echo done".into()],
            node_config: vec![],
            mounts: vec![(
                "/dev/xvdb".into(),
                VolumeMount { file_system: "xfs".into(), path: "/data".into(), persist: true },
            )],
        }
    }

    #[test]
    fn amazon_linux_2_calls_bootstrap_with_every_kubelet_setting_between_the_stages() {
        let text = render(&cluster(), &bootstrap(OsFamily::AmazonLinux2), false);
        let expected = "#!/bin/bash\nset -o xtrace\n\
mkfs.xfs /dev/xvdb\nmkdir -p /data\nmount /dev/xvdb /data\necho '/dev/xvdb /data xfs defaults 0 2' >> /etc/fstab\n\
sysctl -w vm.max_map_count=262144\n\
/etc/eks/bootstrap.sh prod --b64-cluster-ca Q0E= --apiserver-endpoint https://ABC.gr7.eu-west-1.eks.amazonaws.com --dns-cluster-ip 172.20.0.10 --container-runtime containerd --use-max-pods false --kubelet-extra-args '--node-labels=node.kubernetes.io/role=batch,team=data --register-with-taints=dedicated=batch:NoSchedule --kube-reserved=cpu=250m --max-pods=58'\n\
echo done\n";
        assert_eq!(text, expected);
        assert!(!text.contains("target-lifecycle-state"));
        assert!(
            render(&cluster(), &bootstrap(OsFamily::AmazonLinux2), true).contains("Warmed"),
            "warm pools get the guard"
        );
    }

    #[test]
    fn amazon_linux_2023_is_a_multipart_with_a_nodeconfig() {
        let mut b = bootstrap(OsFamily::AmazonLinux2023);
        b.node_config.push("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}".into());
        let text = render(&cluster(), &b, false);
        assert!(text.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//spots-booster//\"\n"));
        assert_eq!(text.matches("--//spots-booster//\n").count(), 4, "shell, user NodeConfig, ours, post: {text}");
        assert!(text.ends_with("--//spots-booster//--\n"));
        assert!(text.contains("    apiServerEndpoint: https://ABC.gr7.eu-west-1.eks.amazonaws.com\n"));
        assert!(text.contains("    cidr: 172.20.0.0/16\n"));
        assert!(text.contains("      maxPods: 58\n"));
        assert!(text.contains("    - \"--node-labels=node.kubernetes.io/role=batch,team=data\"\n"));
        assert!(text.contains("    - \"--register-with-taints=dedicated=batch:NoSchedule\"\n"));
        let ours = text.split("--//spots-booster//\n").nth(3).unwrap();
        let yaml = ours.split_once("\n\n").unwrap().1;
        let parsed: serde_yaml::Value = serde_yaml::from_str(yaml).expect("our NodeConfig is YAML");
        assert_eq!(parsed["spec"]["kubelet"]["flags"][2].as_str(), Some("--kube-reserved=cpu=250m"));
    }

    #[test]
    fn bottlerocket_is_toml_settings() {
        let text = render(&cluster(), &bootstrap(OsFamily::Bottlerocket), false);
        assert!(
            text.starts_with("[settings.kubernetes]\napi-server = \"https://ABC.gr7.eu-west-1.eks.amazonaws.com\"\n")
        );
        assert!(text.contains("cluster-dns-ip = \"172.20.0.10\"\nmax-pods = 58\n"));
        assert!(text.contains("\"node.kubernetes.io/role\" = \"batch\"\n"));
        assert!(text.contains("\"dedicated\" = [\"batch:NoSchedule\"]\n"));
    }

    #[test]
    fn the_same_design_renders_the_same_bytes() {
        let b = bootstrap(OsFamily::AmazonLinux2023);
        assert_eq!(render(&cluster(), &b, true), render(&cluster(), &b, true));
    }
}
