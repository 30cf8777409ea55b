//! EC2 launch templates: read back as our data, created tagged with their owner, versioned,
//! deleted.

use std::collections::BTreeMap;

use aws_sdk_ec2::types as ec2;

use super::{not_found, AwsNodeGroups};
use crate::instancegroup::cloud::{CloudError, TemplateFacts};
use crate::instancegroup::design::{Metadata, Placement};
use crate::instancegroup::launch::{BlockDevice, LaunchTemplateData};

impl AwsNodeGroups {
    pub(super) async fn launch_template(&self, name: &str) -> Result<Option<TemplateFacts>, CloudError> {
        let out = match self.ec2.describe_launch_templates().launch_template_names(name).send().await {
            Ok(out) => out,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(self.call("ec2:DescribeLaunchTemplates", name, e)),
        };
        let Some(template) = out.launch_templates().first() else { return Ok(None) };
        let latest = template.latest_version_number().unwrap_or(1).to_string();
        let data = self.template_version_data(name, &latest).await?;
        let created = template
            .create_time()
            .and_then(|t| jiff::Timestamp::from_second(t.secs()).ok())
            .map(|t| t.strftime("%Y%m%d%H%M%S").to_string())
            .unwrap_or_default();
        let tags = template
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
            .collect();
        Ok(Some(TemplateFacts { name: name.to_string(), latest_version: latest, data, created, tags }))
    }

    pub(super) async fn create_launch_template(
        &self,
        name: &str,
        owner: &BTreeMap<String, String>,
        data: &LaunchTemplateData,
    ) -> Result<String, CloudError> {
        let tags = owner.iter().map(|(k, v)| ec2::Tag::builder().key(k).value(v).build());
        let out = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .tag_specifications(
                ec2::TagSpecification::builder()
                    .resource_type(ec2::ResourceType::LaunchTemplate)
                    .set_tags(Some(tags.collect()))
                    .build(),
            )
            .version_description("spots-booster")
            .launch_template_data(template_request(data))
            .send()
            .await
            .map_err(|e| self.call("ec2:CreateLaunchTemplate", name, e))?;
        Ok(out.launch_template().and_then(|t| t.latest_version_number()).unwrap_or(1).to_string())
    }

    pub(super) async fn create_template_version(
        &self,
        name: &str,
        data: &LaunchTemplateData,
    ) -> Result<String, CloudError> {
        let out = self
            .ec2
            .create_launch_template_version()
            .launch_template_name(name)
            .version_description("spots-booster")
            .launch_template_data(template_request(data))
            .send()
            .await
            .map_err(|e| self.call("ec2:CreateLaunchTemplateVersion", name, e))?;
        Ok(out.launch_template_version().and_then(|v| v.version_number()).map(|v| v.to_string()).unwrap_or_default())
    }

    /// Idempotent: a template already gone is done, whatever the service answers for a missing
    /// name (moto answers `MissingParameter`), so its existence is read before and after.
    pub(super) async fn delete_launch_template(&self, name: &str) -> Result<(), CloudError> {
        let Some(id) = self.launch_template_id(name).await? else { return Ok(()) };
        match self.ec2.delete_launch_template().launch_template_id(&id).send().await {
            Ok(_) => Ok(()),
            Err(_) if self.launch_template_id(name).await?.is_none() => Ok(()),
            Err(e) => Err(self.call("ec2:DeleteLaunchTemplate", name, e)),
        }
    }

    async fn template_version_data(&self, name: &str, version: &str) -> Result<LaunchTemplateData, CloudError> {
        let out = self
            .ec2
            .describe_launch_template_versions()
            .launch_template_name(name)
            .versions(version)
            .send()
            .await
            .map_err(|e| self.call("ec2:DescribeLaunchTemplateVersions", name, e))?;
        let data = out.launch_template_versions().first().and_then(|v| v.launch_template_data());
        Ok(data.map(template_data_from_sdk).unwrap_or_default())
    }

    /// The id of the launch template named `name`, `None` when there is none.
    async fn launch_template_id(&self, name: &str) -> Result<Option<String>, CloudError> {
        match self.ec2.describe_launch_templates().launch_template_names(name).send().await {
            Ok(out) => Ok(out.launch_templates().first().and_then(|t| t.launch_template_id()).map(String::from)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(self.call("ec2:DescribeLaunchTemplates", name, e)),
        }
    }
}

/// Our launch template data → the SDK request.
fn template_request(data: &LaunchTemplateData) -> ec2::RequestLaunchTemplateData {
    let mut request = ec2::RequestLaunchTemplateData::builder()
        .image_id(&data.image_id)
        .instance_type(ec2::InstanceType::from(data.instance_type.as_str()))
        .iam_instance_profile(
            ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .arn(&data.instance_profile_arn)
                .build(),
        )
        .set_security_group_ids(Some(data.security_group_ids.clone()))
        .set_key_name(data.key_name.clone())
        .user_data(&data.user_data);
    for device in &data.block_devices {
        request = request.block_device_mappings(
            ec2::LaunchTemplateBlockDeviceMappingRequest::builder()
                .device_name(&device.device)
                .ebs(
                    ec2::LaunchTemplateEbsBlockDeviceRequest::builder()
                        .volume_type(ec2::VolumeType::from(device.volume_type.as_str()))
                        .set_volume_size(device.size)
                        .set_iops(device.iops)
                        .set_throughput(device.throughput)
                        .delete_on_termination(device.delete_on_termination)
                        .set_encrypted(device.encrypted)
                        .set_snapshot_id(device.snapshot_id.clone())
                        .build(),
                )
                .build(),
        );
    }
    request = request.metadata_options(
        ec2::LaunchTemplateInstanceMetadataOptionsRequest::builder()
            .set_http_endpoint(
                data.metadata.http_endpoint.as_deref().map(ec2::LaunchTemplateInstanceMetadataEndpointState::from),
            )
            .set_http_tokens(data.metadata.http_tokens.as_deref().map(ec2::LaunchTemplateHttpTokensState::from))
            .set_http_put_response_hop_limit(data.metadata.http_put_hop_limit)
            .instance_metadata_tags(ec2::LaunchTemplateInstanceMetadataTagsState::Disabled)
            .build(),
    );
    for (resource, tags) in &data.tag_specifications {
        request = request.tag_specifications(
            ec2::LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(ec2::ResourceType::from(resource.as_str()))
                .set_tags(Some(tags.iter().map(|(k, v)| ec2::Tag::builder().key(k).value(v).build()).collect()))
                .build(),
        );
    }
    if let Some(price) = &data.spot_max_price {
        request = request.instance_market_options(
            ec2::LaunchTemplateInstanceMarketOptionsRequest::builder()
                .market_type(ec2::MarketType::Spot)
                .spot_options(ec2::LaunchTemplateSpotMarketOptionsRequest::builder().max_price(price).build())
                .build(),
        );
    }
    if data.placement != Placement::default() {
        request = request.placement(
            ec2::LaunchTemplatePlacementRequest::builder()
                .set_availability_zone(data.placement.availability_zone.clone())
                .set_host_resource_group_arn(data.placement.host_resource_group_arn.clone())
                .set_tenancy(data.placement.tenancy.as_deref().map(ec2::Tenancy::from))
                .build(),
        );
    }
    for arn in &data.licenses {
        request = request.license_specifications(
            ec2::LaunchTemplateLicenseConfigurationRequest::builder().license_configuration_arn(arn).build(),
        );
    }
    request.build()
}

/// The SDK's launch template data → ours.
fn template_data_from_sdk(data: &ec2::ResponseLaunchTemplateData) -> LaunchTemplateData {
    let mut security_group_ids: Vec<String> = data.security_group_ids().to_vec();
    security_group_ids.sort();
    let mut block_devices: Vec<BlockDevice> = data
        .block_device_mappings()
        .iter()
        .map(|m| {
            let ebs = m.ebs();
            BlockDevice {
                device: m.device_name().unwrap_or_default().to_string(),
                volume_type: ebs.and_then(|e| e.volume_type()).map(|t| t.as_str().to_string()).unwrap_or_default(),
                size: ebs.and_then(|e| e.volume_size()),
                iops: ebs.and_then(|e| e.iops()),
                throughput: ebs.and_then(|e| e.throughput()),
                delete_on_termination: ebs.and_then(|e| e.delete_on_termination()).unwrap_or(true),
                encrypted: ebs.and_then(|e| e.encrypted()),
                snapshot_id: ebs.and_then(|e| e.snapshot_id()).map(String::from),
            }
        })
        .collect();
    block_devices.sort();
    let metadata = data
        .metadata_options()
        .map(|m| Metadata {
            http_endpoint: m.http_endpoint().map(|v| v.as_str().to_string()),
            http_tokens: m.http_tokens().map(|v| v.as_str().to_string()),
            http_put_hop_limit: m.http_put_response_hop_limit(),
        })
        .unwrap_or_default();
    let tag_specifications = data
        .tag_specifications()
        .iter()
        .filter_map(|spec| {
            let resource = spec.resource_type()?.as_str().to_string();
            // moto echoes the template's own tags here; they are not launch data.
            if resource == "launch-template" {
                return None;
            }
            let tags =
                spec.tags().iter().filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string()))).collect();
            Some((resource, tags))
        })
        .collect();
    let placement = data
        .placement()
        .map(|p| Placement {
            availability_zone: p.availability_zone().map(String::from),
            host_resource_group_arn: p.host_resource_group_arn().map(String::from),
            tenancy: p.tenancy().map(|t| t.as_str().to_string()),
        })
        .unwrap_or_default();
    let mut licenses: Vec<String> =
        data.license_specifications().iter().filter_map(|l| l.license_configuration_arn().map(String::from)).collect();
    licenses.sort();
    LaunchTemplateData {
        image_id: data.image_id().unwrap_or_default().to_string(),
        instance_type: data.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
        instance_profile_arn: data.iam_instance_profile().and_then(|p| p.arn()).unwrap_or_default().to_string(),
        security_group_ids,
        key_name: data.key_name().map(String::from),
        user_data: data.user_data().unwrap_or_default().to_string(),
        block_devices,
        metadata,
        tag_specifications,
        spot_max_price: data
            .instance_market_options()
            .and_then(|m| m.spot_options())
            .and_then(|s| s.max_price())
            .map(String::from),
        placement,
        licenses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> LaunchTemplateData {
        LaunchTemplateData {
            image_id: "ami-0abc".into(),
            instance_type: "m5.large".into(),
            instance_profile_arn: "arn:aws:iam::123456789012:instance-profile/spots-booster/ig".into(),
            security_group_ids: vec!["sg-1".into(), "sg-2".into()],
            key_name: Some("ops".into()),
            user_data: "IyEvYmluL2Jhc2g=".into(),
            block_devices: vec![BlockDevice {
                device: "/dev/xvda".into(),
                volume_type: "gp3".into(),
                size: Some(50),
                iops: Some(3000),
                throughput: Some(125),
                delete_on_termination: true,
                encrypted: Some(true),
                snapshot_id: None,
            }],
            metadata: Metadata {
                http_endpoint: Some("enabled".into()),
                http_tokens: Some("required".into()),
                http_put_hop_limit: Some(2),
            },
            tag_specifications: BTreeMap::from([(
                "instance".to_string(),
                BTreeMap::from([("team".to_string(), "web".to_string())]),
            )]),
            spot_max_price: Some("0.05".into()),
            placement: Placement { tenancy: Some("default".into()), ..Placement::default() },
            licenses: vec!["arn:aws:license-manager:eu-west-1:123456789012:license-configuration:lic-1".into()],
        }
    }

    #[test]
    fn a_template_request_carries_every_field_of_the_launch_data() {
        let d = data();
        let r = template_request(&d);
        assert_eq!((r.image_id(), r.instance_type().map(|t| t.as_str())), (Some("ami-0abc"), Some("m5.large")));
        assert_eq!(r.iam_instance_profile().and_then(|p| p.arn()), Some(d.instance_profile_arn.as_str()));
        assert_eq!(
            (r.security_group_ids(), r.key_name()),
            (&["sg-1".to_string(), "sg-2".to_string()][..], Some("ops"))
        );
        assert_eq!(r.user_data(), Some("IyEvYmluL2Jhc2g="));
        let ebs = r.block_device_mappings()[0].ebs().unwrap();
        assert_eq!(r.block_device_mappings()[0].device_name(), Some("/dev/xvda"));
        assert_eq!(
            (ebs.volume_type().map(|t| t.as_str()), ebs.volume_size(), ebs.iops(), ebs.throughput()),
            (Some("gp3"), Some(50), Some(3000), Some(125))
        );
        assert_eq!((ebs.delete_on_termination(), ebs.encrypted(), ebs.snapshot_id()), (Some(true), Some(true), None));
        let m = r.metadata_options().unwrap();
        assert_eq!(
            (
                m.http_endpoint().map(|v| v.as_str()),
                m.http_tokens().map(|v| v.as_str()),
                m.http_put_response_hop_limit()
            ),
            (Some("enabled"), Some("required"), Some(2))
        );
        assert_eq!(m.instance_metadata_tags(), Some(&ec2::LaunchTemplateInstanceMetadataTagsState::Disabled));
        let tags = &r.tag_specifications()[0];
        assert_eq!(tags.resource_type().map(|t| t.as_str()), Some("instance"));
        assert_eq!((tags.tags()[0].key(), tags.tags()[0].value()), (Some("team"), Some("web")));
        let market = r.instance_market_options().unwrap();
        assert_eq!(market.market_type(), Some(&ec2::MarketType::Spot));
        assert_eq!(market.spot_options().and_then(|s| s.max_price()), Some("0.05"));
        assert_eq!(r.placement().and_then(|p| p.tenancy()).map(|t| t.as_str()), Some("default"));
        assert_eq!(r.license_specifications()[0].license_configuration_arn(), Some(d.licenses[0].as_str()));

        // Defaults ask for nothing: no market options, no placement.
        let plain =
            template_request(&LaunchTemplateData { spot_max_price: None, placement: Placement::default(), ..d });
        assert!(plain.instance_market_options().is_none() && plain.placement().is_none());
    }

    #[test]
    fn launch_data_read_back_from_ec2_equals_what_was_asked_and_ignores_the_templates_own_tags() {
        let d = data();
        let device = &d.block_devices[0];
        let answer = ec2::ResponseLaunchTemplateData::builder()
            .image_id(&d.image_id)
            .instance_type(ec2::InstanceType::from(d.instance_type.as_str()))
            .iam_instance_profile(
                ec2::LaunchTemplateIamInstanceProfileSpecification::builder().arn(&d.instance_profile_arn).build(),
            )
            // EC2 lists them in its own order.
            .security_group_ids("sg-2")
            .security_group_ids("sg-1")
            .key_name("ops")
            .user_data(&d.user_data)
            .block_device_mappings(
                ec2::LaunchTemplateBlockDeviceMapping::builder()
                    .device_name(&device.device)
                    .ebs(
                        ec2::LaunchTemplateEbsBlockDevice::builder()
                            .volume_type(ec2::VolumeType::Gp3)
                            .volume_size(50)
                            .iops(3000)
                            .throughput(125)
                            .delete_on_termination(true)
                            .encrypted(true)
                            .build(),
                    )
                    .build(),
            )
            .metadata_options(
                ec2::LaunchTemplateInstanceMetadataOptions::builder()
                    .http_endpoint(ec2::LaunchTemplateInstanceMetadataEndpointState::Enabled)
                    .http_tokens(ec2::LaunchTemplateHttpTokensState::Required)
                    .http_put_response_hop_limit(2)
                    .build(),
            )
            .tag_specifications(
                ec2::LaunchTemplateTagSpecification::builder()
                    .resource_type(ec2::ResourceType::Instance)
                    .tags(ec2::Tag::builder().key("team").value("web").build())
                    .build(),
            )
            .tag_specifications(
                ec2::LaunchTemplateTagSpecification::builder()
                    .resource_type(ec2::ResourceType::LaunchTemplate)
                    .tags(ec2::Tag::builder().key("owner").value("spots-booster").build())
                    .build(),
            )
            .instance_market_options(
                ec2::LaunchTemplateInstanceMarketOptions::builder()
                    .market_type(ec2::MarketType::Spot)
                    .spot_options(ec2::LaunchTemplateSpotMarketOptions::builder().max_price("0.05").build())
                    .build(),
            )
            .placement(ec2::LaunchTemplatePlacement::builder().tenancy(ec2::Tenancy::Default).build())
            .license_specifications(
                ec2::LaunchTemplateLicenseConfiguration::builder().license_configuration_arn(&d.licenses[0]).build(),
            )
            .build();
        assert_eq!(template_data_from_sdk(&answer), d);
    }
}
