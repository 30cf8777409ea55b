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

use serde::{Deserialize, Serialize};

use super::fast_hash::FastMap;
use super::model::{InstanceFacts, InstanceId, Node, NodeName, Snapshot};

/// Why an Event's word is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distrust {
    /// The Node is neither cordoned nor tainted, which NTH always does to a node it acts on.
    NotCordoned,
    /// The Node was cordoned well before the notice: not NTH's answer to it (an operator's).
    CordonedBeforeNotice,
    /// A kind EC2 sends only to spot instances, about an instance AWS says is on-demand.
    NotSpot,
    /// EC2 has not described the instance the Node names (not asked yet, or gone): neither the
    /// Node's identity nor how the instance is bought is known.
    InstanceNotDescribed,
    /// The Node's name (or, for custom names, its address) is not the instance's it names.
    IdentityMismatch,
    /// Two Nodes name the same instance.
    ClaimedTwice,
    /// A scheduled-maintenance notice, and EC2 lists no scheduled event for the instance.
    NoScheduledEvent,
    /// An interruption notice's Event was not written by NTH.
    NotFromNth,
    /// The Event names an instance its Node does not run.
    InstanceMismatch,
    /// The Event is about another object than the Node (its `involvedObject.uid`), or, lacking
    /// a uid, was reported from another host.
    ReporterMismatch,
}

impl Distrust {
    /// The kebab-case name used in reports and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Distrust::NotCordoned => "not-cordoned",
            Distrust::CordonedBeforeNotice => "cordoned-before-notice",
            Distrust::NotSpot => "not-spot",
            Distrust::InstanceNotDescribed => "instance-not-described",
            Distrust::IdentityMismatch => "identity-mismatch",
            Distrust::ClaimedTwice => "claimed-twice",
            Distrust::NoScheduledEvent => "no-scheduled-event",
            Distrust::NotFromNth => "not-from-nth",
            Distrust::InstanceMismatch => "instance-mismatch",
            Distrust::ReporterMismatch => "reporter-mismatch",
        }
    }

    /// Every verdict, for metric labels.
    pub const ALL: [Distrust; 10] = [
        Distrust::NotFromNth,
        Distrust::NotCordoned,
        Distrust::CordonedBeforeNotice,
        Distrust::NotSpot,
        Distrust::InstanceNotDescribed,
        Distrust::IdentityMismatch,
        Distrust::ClaimedTwice,
        Distrust::NoScheduledEvent,
        Distrust::InstanceMismatch,
        Distrust::ReporterMismatch,
    ];
}

/// What an Event claims about the Node it names, as the Event carries it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventClaim<'e> {
    /// Its `involvedObject.uid`, when it names one.
    pub subject_uid: Option<&'e str>,
    /// The host it was reported from (NTH's IMDS mode names no uid).
    pub reported_from: Option<&'e str>,
    /// The instance it names, when it names one.
    pub instance: Option<&'e InstanceId>,
}

/// The Node an Event names, as the API server has it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NamedNode<'n> {
    /// Its name.
    pub name: &'n NodeName,
    /// Its uid.
    pub uid: Option<&'n str>,
    /// The instance its providerID names.
    pub instance: Option<&'n InstanceId>,
}

/// Whether an Event's word is about the Node it names: it is about this very object (the uid it
/// names is the Node's, or, naming none, it was reported from the Node itself, where NTH's
/// DaemonSet pod runs), and the instance it names, if any, is the one the Node runs. An Event
/// that fails either is about an instance that ran under this name before, or a lie: either way
/// it changes nothing.
pub(crate) fn event_about(claim: EventClaim<'_>, node: NamedNode<'_>) -> Result<(), Distrust> {
    let about = match (claim.subject_uid, node.uid) {
        (Some(named), Some(uid)) => named == uid,
        (Some(_), None) => false,
        (None, _) => claim.reported_from == Some(node.name.as_str()),
    };
    if !about {
        return Err(Distrust::ReporterMismatch);
    }
    match (claim.instance, node.instance) {
        (Some(named), Some(runs)) if named != runs => Err(Distrust::InstanceMismatch),
        _ => Ok(()),
    }
}

/// How strongly a Node's claim to an instance stands, to choose between several claimants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Claim {
    /// Neither its name nor its address is the instance's.
    Bare,
    /// A custom name (not one EC2 hands out), reporting the instance's private address.
    Addressed,
    /// Its name is the one EC2 gave the instance.
    Named,
}

/// How strongly `node` claims `instance`, given EC2's description of it.
pub(crate) fn claim(node: &Node, instance: &InstanceId, facts: Option<&InstanceFacts>) -> Claim {
    if named_by_ec2(node, instance, facts) {
        Claim::Named
    } else if !ec2_shaped(node.name.as_bytes())
        && facts.and_then(|f| f.private_ip.as_ref()).is_some_and(|ip| node.internal_ips.iter().any(|a| a == ip))
    {
        Claim::Addressed
    } else {
        Claim::Bare
    }
}

/// Of several claimants to one instance, which to believe: tallies each claim's strength, then
/// names the one claimant with the strongest claim, if exactly one holds it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Claimants<'n> {
    count: u32,
    best: Option<Claim>,
    holding_best: u32,
    believed: Option<&'n Node>,
}

impl<'n> Claimants<'n> {
    /// Counts `node`'s claim to `instance`.
    pub(crate) fn add(&mut self, node: &'n Node, instance: &InstanceId, facts: Option<&InstanceFacts>) {
        self.count += 1;
        let strength = claim(node, instance, facts);
        if strength == Claim::Bare {
            return;
        }
        match self.best.map(|b| strength.cmp(&b)) {
            None | Some(std::cmp::Ordering::Greater) => {
                self.best = Some(strength);
                self.holding_best = 1;
                self.believed = Some(node);
            }
            Some(std::cmp::Ordering::Equal) => self.holding_best += 1,
            Some(std::cmp::Ordering::Less) => {}
        }
    }

    /// How many Nodes claim the instance.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// The claimant believed: the one whose name EC2 gave the instance, or, when none carries
    /// it, the one custom-named Node reporting its private address; `None` when two hold the
    /// strongest claim, or none holds any.
    pub(crate) fn believed(&self) -> Option<&'n Node> {
        self.believed.filter(|_| self.holding_best == 1)
    }
}

/// The instances more than one Node claims, each with the claimant believed (see
/// [`Claimants::believed`]): the one Node whose name EC2 gave that instance (its private DNS
/// name, or its id), or with custom names the one reporting the instance's private address. Any
/// Node may name any instance in its providerID, so a claim alone decides nothing; when two
/// carry the strongest evidence, or none carries any, none is believed (and the instance's
/// notices are refused, which the refusals' metric shows).
pub(crate) fn contested(snapshot: &Snapshot) -> FastMap<&InstanceId, Option<&NodeName>> {
    let mut claims: FastMap<&InstanceId, Claimants<'_>> =
        FastMap::with_capacity_and_hasher(snapshot.nodes.len(), Default::default());
    for node in snapshot.nodes.values() {
        let Some(instance) = node.instance.as_ref() else { continue };
        claims.entry(instance).or_default().add(node, instance, snapshot.instances.get(instance));
    }
    claims.into_iter().filter(|(_, c)| c.count() > 1).map(|(i, c)| (i, c.believed().map(|n| &n.name))).collect()
}

/// Whether `node` is verified as the instance it names, given the instances [`contested`].
pub(crate) fn verify(
    snapshot: &Snapshot,
    contested: &FastMap<&InstanceId, Option<&NodeName>>,
    node: &Node,
) -> Result<(), Distrust> {
    let instance = node.instance.as_ref();
    let facts = instance.and_then(|i| snapshot.instances.get(i));
    let believed = match instance.and_then(|i| contested.get(i)) {
        None => true,
        Some(believed) => *believed == Some(&node.name),
    };
    verify_against(node, facts, !believed)
}

/// [`verify`], with EC2's description of the node's instance (if any) and whether another Node
/// is believed for that instance (or none is) already found.
pub(crate) fn verify_against(node: &Node, facts: Option<&InstanceFacts>, disbelieved: bool) -> Result<(), Distrust> {
    let Some(instance) = node.instance.as_ref() else { return Err(Distrust::IdentityMismatch) };
    if disbelieved {
        return Err(Distrust::ClaimedTwice);
    }
    let facts = facts.ok_or(Distrust::InstanceNotDescribed)?;
    if matches(node, instance, facts) {
        Ok(())
    } else {
        Err(Distrust::IdentityMismatch)
    }
}

/// The strong evidence: the Node's name is the one EC2 gave the instance (its id, or its private
/// DNS name or that name's host part). A kubelet may write only the Node its credential names.
pub(crate) fn named_by_ec2(node: &Node, instance: &InstanceId, facts: Option<&InstanceFacts>) -> bool {
    let name = node.name.as_bytes();
    let id = instance.as_bytes();
    if name.eq_ignore_ascii_case(id) || (starts_with_ignore_case(name, id) && name.get(id.len()) == Some(&b'.')) {
        return true;
    }
    let Some(dns) = facts.and_then(|f| f.private_dns_name.as_deref()).map(str::as_bytes).filter(|d| !d.is_empty())
    else {
        return false;
    };
    let host = dns.split(|b| *b == b'.').next().unwrap_or_default();
    name.eq_ignore_ascii_case(dns) || name.eq_ignore_ascii_case(host)
}

fn matches(node: &Node, instance: &InstanceId, facts: &InstanceFacts) -> bool {
    if named_by_ec2(node, instance, Some(facts)) {
        return true;
    }
    if ec2_shaped(node.name.as_bytes()) {
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
            private_dns_name: Some(dns.into()),
            private_ip: Some(ip.into()),
            ..InstanceFacts::bought(InstanceLifecycle::Spot)
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
        let contested = contested(&s);
        verify(&s, &contested, &n)
    }

    #[test]
    fn an_event_is_believed_only_about_its_own_node_and_the_instance_it_runs() {
        let (name, i1, i2) = (NodeName::from("n1"), InstanceId::from("i-1"), InstanceId::from("i-2"));
        let node = NamedNode { name: &name, uid: Some("uid-1"), instance: Some(&i1) };
        let claim = |uid, from, instance| EventClaim { subject_uid: uid, reported_from: from, instance };
        assert_eq!(event_about(claim(Some("uid-1"), None, Some(&i1)), node), Ok(()));
        assert_eq!(event_about(claim(Some("uid-9"), Some("n1"), None), node), Err(Distrust::ReporterMismatch));
        assert_eq!(event_about(claim(None, Some("n1"), None), node), Ok(()), "IMDS mode: reported from the node");
        assert_eq!(event_about(claim(None, Some("n2"), None), node), Err(Distrust::ReporterMismatch));
        assert_eq!(event_about(claim(Some("uid-1"), None, Some(&i2)), node), Err(Distrust::InstanceMismatch));
        let unlisted = NamedNode { uid: None, ..node };
        assert_eq!(event_about(claim(Some("uid-1"), None, None), unlisted), Err(Distrust::ReporterMismatch));
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
    fn of_two_nodes_claiming_an_instance_the_one_ec2_named_is_believed() {
        let mut s = Snapshot::default().with_group(Group::test("g"));
        let real = node("ip-10-0-1-2.ec2.internal", "i-0a", &[]);
        let forged = node("workers-7", "i-0a", &["10.0.1.2"]);
        s.instances.insert("i-0a".into(), facts("ip-10-0-1-2.ec2.internal", "10.0.1.2"));
        s.nodes.insert(real.name.clone(), real.clone());
        s.nodes.insert(forged.name.clone(), forged.clone());
        let contested = contested(&s);
        assert_eq!(verify(&s, &contested, &real), Ok(()), "a forged claim never silences the real node");
        assert_eq!(verify(&s, &contested, &forged), Err(Distrust::ClaimedTwice));

        // Both carry EC2's name (the short host and the full DNS name): neither is believed.
        let twin = node("ip-10-0-1-2", "i-0a", &[]);
        s.nodes.insert(twin.name.clone(), twin.clone());
        let contested = super::contested(&s);
        assert_eq!(verify(&s, &contested, &real), Err(Distrust::ClaimedTwice));
        assert_eq!(verify(&s, &contested, &twin), Err(Distrust::ClaimedTwice));

        // Neither does, and both report the instance's address: neither is believed, though the
        // address would verify a lone custom name.
        let mut s = Snapshot::default().with_group(Group::test("g"));
        s.instances.insert("i-0a".into(), facts("ip-10-0-1-2.ec2.internal", "10.0.1.2"));
        for n in [node("workers-7", "i-0a", &["10.0.1.2"]), node("workers-8", "i-0a", &["10.0.1.2"])] {
            s.nodes.insert(n.name.clone(), n);
        }
        let contested = super::contested(&s);
        assert!(s.nodes.values().all(|n| verify(&s, &contested, n) == Err(Distrust::ClaimedTwice)));
    }

    /// Custom node names: of two claimants, the one reporting the address EC2 gives the
    /// instance is believed, so a Node naming another's instance cannot silence the real one.
    #[test]
    fn of_two_custom_named_claimants_the_one_ec2_s_address_names_is_believed() {
        let mut s = Snapshot::default().with_group(Group::test("g"));
        s.instances.insert("i-0a".into(), facts("ip-10-0-1-2.ec2.internal", "10.0.1.2"));
        let real = node("workers-7", "i-0a", &["10.0.1.2"]);
        let impostor = node("workers-8", "i-0a", &["10.0.9.9"]);
        for n in [&real, &impostor] {
            s.nodes.insert(n.name.clone(), n.clone());
        }
        let contested = contested(&s);
        assert_eq!(verify(&s, &contested, &real), Ok(()));
        assert_eq!(verify(&s, &contested, &impostor), Err(Distrust::ClaimedTwice));
        // An EC2-shaped impostor name reporting the address holds no claim by it.
        let shaped = node("ip-10-0-9-9.ec2.internal", "i-0a", &["10.0.1.2"]);
        s.nodes.insert(shaped.name.clone(), shaped.clone());
        let contested = super::contested(&s);
        assert_eq!(verify(&s, &contested, &real), Ok(()), "{contested:?}");
        // The name EC2 gave outranks any address.
        let named = node("ip-10-0-1-2.ec2.internal", "i-0a", &[]);
        s.nodes.insert(named.name.clone(), named.clone());
        let contested = super::contested(&s);
        assert_eq!(verify(&s, &contested, &named), Ok(()));
        assert_eq!(verify(&s, &contested, &real), Err(Distrust::ClaimedTwice));
    }
}
