//! EKS: the cluster an InstanceGroup's nodes join (endpoint, CA, service CIDR, VPC).

use aws_sdk_autoscaling::error::ProvideErrorMetadata;

use super::AwsNodeGroups;
use crate::instancegroup::cloud::CloudError;
use crate::instancegroup::userdata::ClusterInfo;

impl AwsNodeGroups {
    pub(super) async fn describe_cluster(&self, name: &str) -> Result<ClusterInfo, CloudError> {
        let out = match self.eks.describe_cluster().name(name).send().await {
            Ok(out) => out,
            Err(e) if e.code() == Some("ResourceNotFoundException") => {
                return Err(CloudError::NotFound { what: "EKS cluster", name: name.to_string(), scope: None })
            }
            Err(e) => return Err(self.call("eks:DescribeCluster", name, e)),
        };
        let cluster = out.cluster();
        Ok(ClusterInfo {
            name: name.to_string(),
            endpoint: cluster.and_then(|c| c.endpoint()).unwrap_or_default().to_string(),
            certificate_authority: cluster
                .and_then(|c| c.certificate_authority())
                .and_then(|ca| ca.data())
                .unwrap_or_default()
                .to_string(),
            service_cidr: cluster
                .and_then(|c| c.kubernetes_network_config())
                .and_then(|n| n.service_ipv4_cidr())
                .map(String::from),
            vpc_id: cluster.and_then(|c| c.resources_vpc_config()).and_then(|v| v.vpc_id()).map(String::from),
        })
    }
}
