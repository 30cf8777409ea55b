//! EC2's networks: subnets and security groups named by id or `Name` tag, within the cluster's VPC.

use std::collections::BTreeSet;

use aws_sdk_ec2::types as ec2;

use super::AwsNodeGroups;
use crate::instancegroup::cloud::CloudError;

impl AwsNodeGroups {
    /// Ids for `refs` (ids, or `Name` tags), all in `vpc` when it is known: an id of another
    /// VPC is refused like a name that is not found, so an InstanceGroup cannot place nodes in, or
    /// open them to, someone else's network.
    pub(super) async fn resolve(
        &self,
        what: &'static str,
        vpc: Option<&str>,
        refs: &[String],
    ) -> Result<Vec<String>, CloudError> {
        let id_prefix = if what == "subnet" { "subnet-" } else { "sg-" };
        let (ids, names): (BTreeSet<String>, Vec<String>) = {
            let (ids, names): (Vec<&String>, Vec<&String>) = refs.iter().partition(|r| r.starts_with(id_prefix));
            (ids.into_iter().cloned().collect(), names.into_iter().cloned().collect())
        };
        let mut resolved = BTreeSet::new();
        if !ids.is_empty() {
            if let Some(vpc) = vpc {
                let id_filter = if what == "subnet" { "subnet-id" } else { "group-id" };
                let filter =
                    ec2::Filter::builder().name(id_filter).set_values(Some(ids.iter().cloned().collect())).build();
                let found = self.describe_in(what, vpc_filter(Some(vpc)).into_iter().chain([filter]).collect()).await?;
                let in_vpc: BTreeSet<&String> = found.iter().map(|(_, id)| id).collect();
                if let Some(stray) = ids.iter().find(|id| !in_vpc.contains(id)) {
                    return Err(CloudError::NotFound { what, name: stray.clone(), scope: Some(vpc.to_string()) });
                }
            }
            resolved.extend(ids);
        }
        if names.is_empty() {
            return Ok(resolved.into_iter().collect());
        }
        let name_filter = ec2::Filter::builder().name("tag:Name").set_values(Some(names.clone())).build();
        let found = self.describe_in(what, vpc_filter(vpc).into_iter().chain([name_filter]).collect()).await?;
        for name in names {
            match found.iter().find(|(n, _)| n.as_deref() == Some(name.as_str())) {
                Some((_, id)) => {
                    resolved.insert(id.clone());
                }
                None => return Err(CloudError::NotFound { what, name, scope: vpc.map(String::from) }),
            }
        }
        Ok(resolved.into_iter().collect())
    }

    /// Subnets or security groups matching `filters`: each one's `Name` tag (if any) and id.
    async fn describe_in(
        &self,
        what: &'static str,
        filters: Vec<ec2::Filter>,
    ) -> Result<Vec<(Option<String>, String)>, CloudError> {
        if what == "subnet" {
            let out = self
                .ec2
                .describe_subnets()
                .set_filters(Some(filters))
                .send()
                .await
                .map_err(|e| self.call("ec2:DescribeSubnets", what, e))?;
            Ok(out
                .subnets()
                .iter()
                .filter_map(|s| Some((tag_value(s.tags(), "Name"), s.subnet_id()?.to_string())))
                .collect())
        } else {
            let out = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(filters))
                .send()
                .await
                .map_err(|e| self.call("ec2:DescribeSecurityGroups", what, e))?;
            Ok(out
                .security_groups()
                .iter()
                .filter_map(|g| Some((tag_value(g.tags(), "Name"), g.group_id()?.to_string())))
                .collect())
        }
    }
}

fn vpc_filter(vpc: Option<&str>) -> Option<ec2::Filter> {
    vpc.map(|v| ec2::Filter::builder().name("vpc-id").values(v).build())
}

fn tag_value(tags: &[ec2::Tag], key: &str) -> Option<String> {
    tags.iter().find(|t| t.key() == Some(key)).and_then(|t| t.value().map(String::from))
}
