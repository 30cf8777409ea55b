//! Which provisioner an InstanceGroup names, and its validated design: `eks` through
//! [`super::validate`], `eks-managed` through [`super::validate_managed`].

use super::api::InstanceGroupSpec;
use super::design::GroupDesign;
use super::node_group::NodeGroupDesign;
use super::validate::{validate, IamRules, ObjectInfo, ValidateError};
use super::validate_managed::validate_managed;

/// A validated InstanceGroup, by provisioner.
#[derive(Debug, Clone, PartialEq)]
pub enum Design {
    /// `eks`: a launch template and an Auto Scaling group the reconciler owns.
    SelfManaged(Box<GroupDesign>),
    /// `eks-managed`: an EKS managed node group.
    Managed(Box<NodeGroupDesign>),
}

/// Validates and normalises an InstanceGroup of either provisioner (`eks-fargate` and unknown
/// ones are refused by `validate`, naming `spec.provisioner`).
pub fn validate_design(
    info: &ObjectInfo<'_>,
    spec: &InstanceGroupSpec,
    iam: &IamRules,
) -> Result<Design, ValidateError> {
    if spec.provisioner.eq_ignore_ascii_case("eks-managed") {
        validate_managed(info, spec, iam).map(|d| Design::Managed(Box::new(d)))
    } else {
        validate(info, spec, iam).map(|d| Design::SelfManaged(Box::new(d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instancegroup::api::InstanceGroup;

    fn design_of(ig: &InstanceGroup, provisioner: &str) -> Result<Design, ValidateError> {
        let mut ig = ig.clone();
        ig.spec.provisioner = provisioner.into();
        let info = ObjectInfo { namespace: "instance-manager", name: "g", cluster: "prod-euw1", ..Default::default() };
        validate_design(&info, &ig.spec, &IamRules::default())
    }

    #[test]
    fn each_provisioner_has_its_design_and_fargate_is_refused_by_name() {
        let managed: InstanceGroup = serde_yaml::from_str(include_str!("../testdata/managed-spot.yaml")).unwrap();
        assert!(matches!(design_of(&managed, "EKS-Managed"), Ok(Design::Managed(_))));
        let mut eks: InstanceGroup = serde_yaml::from_str(include_str!("../testdata/batch-spot.yaml")).unwrap();
        eks.spec.eks.as_mut().unwrap().configuration.image = "ami-0123456789abcdef0".into();
        assert!(matches!(design_of(&eks, "eks"), Ok(Design::SelfManaged(_))));
        let fargate = design_of(&eks, "eks-fargate").unwrap_err();
        assert_eq!(fargate.errors[0].field, "spec.provisioner");
        assert_eq!(fargate.reason().as_str(), "Unsupported", "{fargate}");
    }
}
