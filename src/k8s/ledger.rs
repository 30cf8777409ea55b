//! The boost ledger in a ConfigMap of the booster's own namespace, written with optimistic
//! concurrency: a save carries the resourceVersion last read, so two writers (a split brain
//! during a lease hand-over) cannot silently overwrite each other; the loser's save fails (409)
//! and the shared ledger re-reads before trying again.
//!
//! The ConfigMap carries a finalizer, so it fails closed across restarts too: a `kubectl delete`
//! only marks it, the daemon refuses to plan from it (an error and
//! `spots_booster_ledger_errors_total`), and its records stay readable. Starting afresh is an
//! explicit act: remove the finalizer, then the daemon starts from an empty ledger.
//!
//! The pool memory lives in a ConfigMap of its own, `{ledger}-pools`, with its own
//! resourceVersion: it only advises, so nothing it holds (its size, a failed save, a re-read)
//! can make a ledger save fail or lose the ledger's concurrency check. It is cut to
//! [`POOLS_MAX_BYTES`] before every save. One that does not parse is copied to
//! `{ledger}-pools-unparsable` before anything overwrites it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::Mutex;
use tracing::{error, warn};

use crate::core::{BoostLedger, PoolMemory};
use crate::ports::{LedgerError, LedgerStore};

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The data key the ledger is stored under.
pub(crate) const LEDGER_KEY: &str = "ledger.json";

/// The data key the pool memory is stored under, in its own ConfigMap (and, before pool memory
/// moved out, beside the ledger: read from there until the pool memory's own object exists).
pub(crate) const POOLS_KEY: &str = "pools.json";

/// Keeps a deleted ledger readable until someone removes it on purpose.
pub(crate) const LEDGER_FINALIZER: &str = "spots-booster.io/ledger";

/// The most bytes of pool memory saved: well within a ConfigMap's 1 MiB, whatever the names.
pub const POOLS_MAX_BYTES: usize = 512 * 1024;

/// On the copy of an unparsable pool memory: the object and resourceVersion it was copied from.
const SET_ASIDE_FROM: &str = "spots-booster.io/set-aside-from";

/// The pool memory's ConfigMap for the ledger `ledger`.
pub fn pools_configmap_name(ledger: &str) -> String {
    format!("{ledger}-pools")
}

/// Where an unparsable pool memory of the ledger `ledger` is copied to.
pub fn unparsable_pools_configmap_name(ledger: &str) -> String {
    format!("{ledger}-pools-unparsable")
}

/// A ledger in `namespace/name`, and its pool memory in `namespace/name-pools`.
pub struct ConfigMapLedger {
    api: Api<ConfigMap>,
    name: String,
    pools_name: String,
    /// The ledger's resourceVersion and text as last read or written (`None`: the ConfigMap does
    /// not exist yet).
    version: Mutex<Stored>,
    /// The pool memory's, kept apart: reading or writing it never moves the ledger's version.
    pools: Mutex<StoredPools>,
    /// This process has seen the ConfigMap exist: from then on, a missing one was deleted and is
    /// an error, never an empty ledger (that would boost every covered instance again).
    existed: AtomicBool,
    /// The pool memory's own ConfigMap has been seen: the ledger's old `pools.json` is no
    /// longer read nor kept.
    pools_exist: AtomicBool,
    /// `--dry-run`: boosts that were never sent must not be persisted (a later real run would
    /// take their instances as covered), so saves stay in memory.
    dry_run: Option<Mutex<Option<BoostLedger>>>,
    /// `--dry-run`'s pool memory, kept in memory likewise.
    dry_run_pools: Mutex<Option<PoolMemory>>,
}

/// What the ledger's ConfigMap held when last read or written.
#[derive(Debug, Default)]
struct Stored {
    version: Option<String>,
    ledger: Option<String>,
    /// The pool memory the ledger's object still holds from before it moved out, kept as it is
    /// until the pool memory's own object exists.
    legacy_pools: Option<String>,
}

/// What the pool memory's ConfigMap held when last read or written.
#[derive(Debug, Default)]
struct StoredPools {
    version: Option<String>,
    /// Text that did not parse, with where it was read (`namespace/name@resourceVersion`):
    /// copied aside before the next save may overwrite it.
    unparsable: Option<(String, String)>,
}

impl std::fmt::Debug for ConfigMapLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapLedger").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ConfigMapLedger {
    /// The ledger kept in ConfigMap `namespace/name`, its pool memory in `namespace/name-pools`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        ConfigMapLedger {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            pools_name: pools_configmap_name(name),
            version: Mutex::new(Stored::default()),
            pools: Mutex::new(StoredPools::default()),
            existed: AtomicBool::new(false),
            pools_exist: AtomicBool::new(false),
            dry_run: None,
            dry_run_pools: Mutex::new(None),
        }
    }

    /// Reads the ConfigMap but keeps every save in memory (`--dry-run`).
    pub fn read_only(mut self) -> Self {
        self.dry_run = Some(Mutex::new(None));
        self
    }

    fn namespace(&self) -> String {
        self.api.namespace().unwrap_or_default().to_string()
    }
}

impl LedgerStore for ConfigMapLedger {
    async fn load(&self) -> Result<BoostLedger, LedgerError> {
        if let Some(kept) = &self.dry_run {
            if let Some(ledger) = kept.lock().await.clone() {
                return Ok(ledger);
            }
        }
        let mut stored = self.version.lock().await;
        let Some(cm) = self.read(&mut stored).await.map_err(LedgerError::Load)? else {
            return Ok(BoostLedger::default());
        };
        if cm.metadata.deletion_timestamp.is_some() {
            return Err(LedgerError::Load(
                format!(
                    "ConfigMap {}/{} is being deleted: refusing to plan from a ledger that is going away \
                     (to start afresh, remove its finalizer {LEDGER_FINALIZER})",
                    self.namespace(),
                    self.name
                )
                .into(),
            ));
        }
        match stored.ledger.as_deref() {
            None => Ok(BoostLedger::default()),
            // A ledger that does not parse is an error, never an empty ledger: that would boost
            // every covered instance again.
            Some(text) => serde_json::from_str(text).map_err(|e| {
                LedgerError::Load(format!("ConfigMap {}: data.{LEDGER_KEY} is not a ledger: {e}", self.name).into())
            }),
        }
    }

    async fn save(&self, ledger: &BoostLedger) -> Result<(), LedgerError> {
        if let Some(kept) = &self.dry_run {
            *kept.lock().await = Some(ledger.clone());
            return Ok(());
        }
        let text = serde_json::to_string(ledger).map_err(|e| LedgerError::Save(e.into()))?;
        let mut stored = self.version.lock().await;
        self.write(&mut stored, text).await.map_err(LedgerError::Save)
    }

    async fn load_pools(&self) -> Result<PoolMemory, LedgerError> {
        if self.dry_run.is_some() {
            if let Some(memory) = self.dry_run_pools.lock().await.clone() {
                return Ok(memory);
            }
        }
        let mut stored = self.pools.lock().await;
        let cm = self.api.get_opt(&self.pools_name).await.map_err(|e| LedgerError::LoadPools(e.into()))?;
        let (text, version, from) = match cm {
            Some(cm) => {
                self.pools_exist.store(true, Ordering::SeqCst);
                let text = cm.data.as_ref().and_then(|d| d.get(POOLS_KEY)).cloned();
                (text, cm.metadata.resource_version, self.pools_name.clone())
            }
            None => (self.version.lock().await.legacy_pools.clone(), None, self.name.clone()),
        };
        stored.version = version.clone();
        let Some(text) = text else { return Ok(PoolMemory::default()) };
        match serde_json::from_str(&text) {
            Ok(memory) => Ok(memory),
            Err(e) => {
                let aside = unparsable_pools_configmap_name(&self.name);
                error!(configmap = %format!("{}/{from}", self.namespace()), key = POOLS_KEY, error = %e, set_aside = %aside,
                    "the pool memory does not parse: it is copied aside before anything overwrites it");
                let at = format!("{}/{from}@{}", self.namespace(), version.as_deref().unwrap_or("-"));
                stored.unparsable = Some((text, at));
                Err(LedgerError::LoadPools(
                    format!("ConfigMap {from}: data.{POOLS_KEY} is not a pool memory (kept aside in {aside}): {e}")
                        .into(),
                ))
            }
        }
    }

    async fn save_pools(&self, memory: &PoolMemory) -> Result<(), LedgerError> {
        if self.dry_run.is_some() {
            *self.dry_run_pools.lock().await = Some(memory.clone());
            return Ok(());
        }
        let mut fitted = memory.clone();
        if fitted.fit(|m| serde_json::to_vec(m).map_or(true, |b| b.len() <= POOLS_MAX_BYTES)) {
            warn!(
                pools = fitted.pools.len(),
                tracked = fitted.tracked.len(),
                max_bytes = POOLS_MAX_BYTES,
                "the pool memory outgrew its ConfigMap: the least history was left out, fairly between tenants"
            );
        }
        let text = serde_json::to_string(&fitted).map_err(|e| LedgerError::SavePools(e.into()))?;
        let mut stored = self.pools.lock().await;
        if let Some((bad, from)) = stored.unparsable.clone() {
            self.set_aside(&bad, from).await.map_err(LedgerError::SavePools)?;
            stored.unparsable = None;
        }
        let cm =
            self.configmap(&self.pools_name, None, stored.version.clone(), BTreeMap::from([(POOLS_KEY.into(), text)]));
        let written = self.create_or_replace(&cm, stored.version.is_some()).await.map_err(LedgerError::SavePools)?;
        stored.version = written.metadata.resource_version;
        self.pools_exist.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl ConfigMapLedger {
    /// Reads the ledger's ConfigMap into `stored`; `None` when it does not exist (yet: one this
    /// process saw exist and that is gone now was deleted, which is an error).
    async fn read(&self, stored: &mut Stored) -> Result<Option<ConfigMap>, BoxError> {
        let Some(cm) = self.api.get_opt(&self.name).await? else {
            if self.existed.load(Ordering::SeqCst) {
                return Err(format!(
                    "ConfigMap {}/{} was deleted while the daemon ran: refusing to plan from an empty ledger \
                     (restore it, or delete it and restart the daemon to start afresh)",
                    self.namespace(),
                    self.name
                )
                .into());
            }
            *stored = Stored::default();
            return Ok(None);
        };
        self.existed.store(true, Ordering::SeqCst);
        let data = cm.data.as_ref();
        *stored = Stored {
            version: cm.metadata.resource_version.clone(),
            ledger: data.and_then(|d| d.get(LEDGER_KEY)).cloned(),
            legacy_pools: data.and_then(|d| d.get(POOLS_KEY)).cloned(),
        };
        Ok(Some(cm))
    }

    /// Writes the ledger, conditioned on the resourceVersion last seen; the old pool memory it
    /// still holds is kept until the pool memory's own object exists.
    async fn write(&self, stored: &mut Stored, ledger: String) -> Result<(), BoxError> {
        let mut data = BTreeMap::from([(LEDGER_KEY.to_string(), ledger.clone())]);
        let legacy = stored.legacy_pools.take().filter(|_| !self.pools_exist.load(Ordering::SeqCst));
        if let Some(text) = &legacy {
            data.insert(POOLS_KEY.to_string(), text.clone());
        }
        let cm = self.configmap(&self.name, Some(LEDGER_FINALIZER), stored.version.clone(), data);
        let written = self.create_or_replace(&cm, stored.version.is_some()).await;
        let written = match written {
            Ok(written) => written,
            Err(e) => {
                stored.legacy_pools = legacy;
                return Err(e);
            }
        };
        *stored = Stored { version: written.metadata.resource_version, ledger: Some(ledger), legacy_pools: legacy };
        self.existed.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Copies an unparsable pool memory to its own ConfigMap (replacing an older copy).
    async fn set_aside(&self, text: &str, from: String) -> Result<(), BoxError> {
        let name = unparsable_pools_configmap_name(&self.name);
        let existing = self.api.get_opt(&name).await?;
        let mut cm = self.configmap(&name, None, None, BTreeMap::from([(POOLS_KEY.into(), text.to_string())]));
        cm.metadata.annotations = Some(BTreeMap::from([(SET_ASIDE_FROM.to_string(), from)]));
        cm.metadata.resource_version = existing.as_ref().and_then(|c| c.metadata.resource_version.clone());
        self.create_or_replace(&cm, existing.is_some()).await?;
        warn!(configmap = %format!("{}/{name}", self.namespace()), "the unparsable pool memory was set aside");
        Ok(())
    }

    fn configmap(
        &self,
        name: &str,
        finalizer: Option<&str>,
        version: Option<String>,
        data: BTreeMap<String, String>,
    ) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                resource_version: version,
                labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_string(), "spots-booster".to_string())])),
                finalizers: finalizer.map(|f| vec![f.to_string()]),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        }
    }

    async fn create_or_replace(&self, cm: &ConfigMap, exists: bool) -> Result<ConfigMap, BoxError> {
        let pp =
            PostParams { field_manager: Some(crate::k8s::writes::FIELD_MANAGER.to_string()), ..PostParams::default() };
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        Ok(if exists { self.api.replace(name, &pp, cm).await? } else { self.api.create(&pp, cm).await? })
    }
}
