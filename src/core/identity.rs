//! Whether a Node is what it claims to be. A Node names its instance in `spec.providerID`, which
//! whoever registers the Node writes: nothing is drained or terminated for a node until EC2's own
//! description of that instance agrees with the Node.
//!
//! The Node's *name* is the strong evidence: the API server lets a kubelet write only the Node its
//! credential names, and on EKS (and kops, and Karpenter) that name is the instance's private DNS
//! name (`ip-10-0-1-2.ec2.internal`) or, with resource-name hostnames, starts with the instance
//! id. Addresses are reported by the kubelet itself, so they count only for nodes whose names EC2
//! did not give (custom hostnames): a name shaped like an EC2 name that does not match is a lie
//! no address can mend.

use super::fast_hash::{FastMap, FastSet};
use super::model::{InstanceFacts, InstanceId, Node, Snapshot};
use super::signals::Distrust;

/// The instances that more than one Node claims: none of those Nodes is believed.
pub(crate) fn claimed_twice(snapshot: &Snapshot) -> FastSet<&InstanceId> {
    let mut claims: FastMap<&InstanceId, u32> =
        FastMap::with_capacity_and_hasher(snapshot.nodes.len(), Default::default());
    for instance in snapshot.nodes.values().filter_map(|n| n.instance.as_ref()) {
        *claims.entry(instance).or_default() += 1;
    }
    claims.into_iter().filter(|(_, n)| *n > 1).map(|(i, _)| i).collect()
}

/// Whether `node` is verified as the instance it names, given the instances claimed twice.
pub(crate) fn verify(snapshot: &Snapshot, twice: &FastSet<&InstanceId>, node: &Node) -> Result<(), Distrust> {
    let instance = node.instance.as_ref();
    let facts = instance.and_then(|i| snapshot.instances.get(i));
    verify_against(node, facts, instance.is_some_and(|i| twice.contains(i)))
}

/// [`verify`], with EC2's description of the node's instance (if any) and whether another Node
/// claims that instance too already found.
pub(crate) fn verify_against(node: &Node, facts: Option<&InstanceFacts>, claimed_twice: bool) -> Result<(), Distrust> {
    let Some(instance) = node.instance.as_ref() else { return Err(Distrust::IdentityMismatch) };
    if claimed_twice {
        return Err(Distrust::ClaimedTwice);
    }
    let facts = facts.ok_or(Distrust::InstanceNotDescribed)?;
    if matches(node, instance, facts) {
        Ok(())
    } else {
        Err(Distrust::IdentityMismatch)
    }
}

fn matches(node: &Node, instance: &InstanceId, facts: &InstanceFacts) -> bool {
    let name = node.name.as_bytes();
    let id = instance.as_bytes();
    if name.eq_ignore_ascii_case(id) || (starts_with_ignore_case(name, id) && name.get(id.len()) == Some(&b'.')) {
        return true;
    }
    if let Some(dns) = facts.private_dns_name.as_deref().map(str::as_bytes).filter(|d| !d.is_empty()) {
        let host = dns.split(|b| *b == b'.').next().unwrap_or_default();
        if name.eq_ignore_ascii_case(dns) || name.eq_ignore_ascii_case(host) {
            return true;
        }
    }
    if ec2_shaped(name) {
        return false;
    }
    facts.private_ip.as_ref().is_some_and(|ip| node.internal_ips.iter().any(|a| a == ip))
}

fn starts_with_ignore_case(s: &[u8], prefix: &[u8]) -> bool {
    s.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// Names EC2 hands out: `ip-10-0-1-2…` and `i-0123abcd…`.
fn ec2_shaped(name: &[u8]) -> bool {
    let after =
        |prefix: &[u8]| starts_with_ignore_case(name, prefix).then(|| name.get(prefix.len()).copied()).flatten();
    after(b"ip-").is_some_and(|c| c.is_ascii_digit()) || after(b"i-").is_some_and(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{Group, InstanceLifecycle};

    fn facts(dns: &str, ip: &str) -> InstanceFacts {
        InstanceFacts {
            lifecycle: InstanceLifecycle::Spot,
            private_dns_name: Some(dns.into()),
            private_ip: Some(ip.into()),
        }
    }

    fn node(name: &str, instance: &str, ips: &[&str]) -> Node {
        let mut n = Node::test(name, "g");
        n.instance = Some(instance.into());
        n.internal_ips = ips.iter().map(|s| s.to_string()).collect();
        n
    }

    fn check(n: Node, f: Option<InstanceFacts>) -> Result<(), Distrust> {
        let mut s = Snapshot::default().with_group(Group::test("g"));
        s.instances.clear();
        if let Some(f) = f {
            s.instances.insert(n.instance.clone().unwrap(), f);
        }
        s.nodes.insert(n.name.clone(), n.clone());
        let twice = claimed_twice(&s);
        verify(&s, &twice, &n)
    }

    #[test]
    fn names_ec2_gave_verify_the_node() {
        let f = || Some(facts("ip-10-0-1-2.ec2.internal", "10.0.1.2"));
        assert_eq!(check(node("ip-10-0-1-2.ec2.internal", "i-0a", &[]), f()), Ok(()));
        assert_eq!(check(node("IP-10-0-1-2.EC2.INTERNAL", "i-0a", &[]), f()), Ok(()), "DNS names are case-blind");
        assert_eq!(check(node("ip-10-0-1-2", "i-0a", &[]), f()), Ok(()), "the short hostname");
        assert_eq!(check(node("i-0a", "i-0a", &[]), f()), Ok(()));
        assert_eq!(check(node("i-0a.us-east-1.compute.internal", "i-0a", &[]), f()), Ok(()), "resource-name hostnames");
        assert_eq!(check(node("workers-7", "i-0a", &["10.0.1.2"]), f()), Ok(()), "a custom name, by its address");
    }

    #[test]
    fn a_node_naming_another_instance_is_refused() {
        // A kubelet on ip-10-0-9-9 registered as itself, naming i-0a in its providerID and
        // reporting i-0a's address: its EC2-given name cannot be mended by an address.
        let f = || Some(facts("ip-10-0-1-2.ec2.internal", "10.0.1.2"));
        assert_eq!(
            check(node("ip-10-0-9-9.ec2.internal", "i-0a", &["10.0.1.2"]), f()),
            Err(Distrust::IdentityMismatch)
        );
        assert_eq!(
            check(node("i-0b.us-east-1.compute.internal", "i-0a", &["10.0.1.2"]), f()),
            Err(Distrust::IdentityMismatch)
        );
        assert_eq!(
            check(node("i-0ab", "i-0a", &[]), f()),
            Err(Distrust::IdentityMismatch),
            "a longer id is another id"
        );
        assert_eq!(check(node("workers-7", "i-0a", &["10.0.9.9"]), f()), Err(Distrust::IdentityMismatch));
        assert_eq!(check(node("workers-7", "i-0a", &[]), f()), Err(Distrust::IdentityMismatch));
        assert_eq!(
            check(node("ip-10-0-1-2.ec2.internal", "i-0a", &[]), None),
            Err(Distrust::InstanceNotDescribed),
            "EC2 not asked (or the instance is gone): nothing verified"
        );
    }

    #[test]
    fn an_instance_two_nodes_claim_is_believed_for_neither() {
        let mut s = Snapshot::default().with_group(Group::test("g"));
        let real = node("ip-10-0-1-2.ec2.internal", "i-0a", &[]);
        let forged = node("workers-7", "i-0a", &["10.0.1.2"]);
        s.instances.insert("i-0a".into(), facts("ip-10-0-1-2.ec2.internal", "10.0.1.2"));
        s.nodes.insert(real.name.clone(), real.clone());
        s.nodes.insert(forged.name.clone(), forged.clone());
        let twice = claimed_twice(&s);
        assert_eq!(verify(&s, &twice, &real), Err(Distrust::ClaimedTwice));
        assert_eq!(verify(&s, &twice, &forged), Err(Distrust::ClaimedTwice));
    }
}
