//! The boost ledger in a ConfigMap of the booster's own namespace, written with optimistic
//! concurrency: a save carries the resourceVersion last read, so two writers (a split brain
//! during a lease hand-over) cannot silently overwrite each other; the loser's save fails (409)
//! and the shared ledger re-reads before trying again.
//!
//! The ConfigMap carries a finalizer, so it fails closed across restarts too: a `kubectl delete`
//! only marks it, the daemon refuses to plan from it (an error and
//! `spots_booster_ledger_errors_total`), and its records stay readable. Starting afresh is an
//! explicit act: remove the finalizer, then the daemon starts from an empty ledger.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::Mutex;

use crate::core::{BoostLedger, PoolMemory};
use crate::ports::{LedgerError, LedgerStore};

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The data key the ledger is stored under.
pub(crate) const LEDGER_KEY: &str = "ledger.json";

/// The data key the pool memory is stored under, beside the ledger: one object, one
/// resourceVersion, one grant.
pub(crate) const POOLS_KEY: &str = "pools.json";

/// Keeps a deleted ledger readable until someone removes it on purpose.
pub(crate) const LEDGER_FINALIZER: &str = "spots-booster.io/ledger";

/// A ledger in `namespace/name`.
pub struct ConfigMapLedger {
    api: Api<ConfigMap>,
    name: String,
    /// The resourceVersion last read or written (`None`: the ConfigMap does not exist yet), with
    /// both keys' text as then: a save of one key writes the other as it was.
    version: Mutex<Stored>,
    /// This process has seen the ConfigMap exist: from then on, a missing one was deleted and is
    /// an error, never an empty ledger (that would boost every covered instance again).
    existed: std::sync::atomic::AtomicBool,
    /// `--dry-run`: boosts that were never sent must not be persisted (a later real run would
    /// take their instances as covered), so saves stay in memory.
    dry_run: Option<Mutex<Option<BoostLedger>>>,
    /// `--dry-run`'s pool memory, kept in memory likewise.
    dry_run_pools: Mutex<Option<PoolMemory>>,
}

/// What the ConfigMap held when last read or written.
#[derive(Debug, Default)]
struct Stored {
    version: Option<String>,
    ledger: Option<String>,
    pools: Option<String>,
}

impl std::fmt::Debug for ConfigMapLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapLedger").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ConfigMapLedger {
    /// The ledger kept in ConfigMap `namespace/name`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        ConfigMapLedger {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            version: Mutex::new(Stored::default()),
            existed: std::sync::atomic::AtomicBool::new(false),
            dry_run: None,
            dry_run_pools: Mutex::new(None),
        }
    }

    /// Reads the ConfigMap but keeps every save in memory (`--dry-run`).
    pub fn read_only(mut self) -> Self {
        self.dry_run = Some(Mutex::new(None));
        self
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
                    self.api.namespace().unwrap_or_default(),
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
        let pools = stored.pools.clone();
        self.write(&mut stored, Some(text), pools).await.map_err(LedgerError::Save)
    }

    async fn load_pools(&self) -> Result<PoolMemory, LedgerError> {
        if self.dry_run.is_some() {
            if let Some(memory) = self.dry_run_pools.lock().await.clone() {
                return Ok(memory);
            }
        }
        let mut stored = self.version.lock().await;
        self.read(&mut stored).await.map_err(LedgerError::LoadPools)?;
        match stored.pools.as_deref() {
            None => Ok(PoolMemory::default()),
            Some(text) => serde_json::from_str(text).map_err(|e| {
                LedgerError::LoadPools(
                    format!("ConfigMap {}: data.{POOLS_KEY} is not a pool memory: {e}", self.name).into(),
                )
            }),
        }
    }

    async fn save_pools(&self, memory: &PoolMemory) -> Result<(), LedgerError> {
        if self.dry_run.is_some() {
            *self.dry_run_pools.lock().await = Some(memory.clone());
            return Ok(());
        }
        let text = serde_json::to_string(memory).map_err(|e| LedgerError::SavePools(e.into()))?;
        let mut stored = self.version.lock().await;
        let ledger = stored.ledger.clone();
        self.write(&mut stored, ledger, Some(text)).await.map_err(LedgerError::SavePools)
    }
}

impl ConfigMapLedger {
    /// Reads the ConfigMap into `stored`; `None` when it does not exist (yet: one this process
    /// saw exist and that is gone now was deleted, which is an error).
    async fn read(&self, stored: &mut Stored) -> Result<Option<ConfigMap>, BoxError> {
        let Some(cm) = self.api.get_opt(&self.name).await? else {
            if self.existed.load(Ordering::SeqCst) {
                return Err(format!(
                    "ConfigMap {}/{} was deleted while the daemon ran: refusing to plan from an empty ledger \
                     (restore it, or delete it and restart the daemon to start afresh)",
                    self.api.namespace().unwrap_or_default(),
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
            pools: data.and_then(|d| d.get(POOLS_KEY)).cloned(),
        };
        Ok(Some(cm))
    }

    /// Writes both keys, conditioned on the resourceVersion last seen.
    async fn write(&self, stored: &mut Stored, ledger: Option<String>, pools: Option<String>) -> Result<(), BoxError> {
        let mut data = BTreeMap::new();
        if let Some(text) = &ledger {
            data.insert(LEDGER_KEY.to_string(), text.clone());
        }
        if let Some(text) = &pools {
            data.insert(POOLS_KEY.to_string(), text.clone());
        }
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: stored.version.clone(),
                labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_string(), "spots-booster".to_string())])),
                finalizers: Some(vec![LEDGER_FINALIZER.to_string()]),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        };
        let pp =
            PostParams { field_manager: Some(crate::k8s::writes::FIELD_MANAGER.to_string()), ..PostParams::default() };
        let written = match stored.version.as_ref() {
            None => self.api.create(&pp, &cm).await?,
            Some(_) => self.api.replace(&self.name, &pp, &cm).await?,
        };
        *stored = Stored { version: written.metadata.resource_version, ledger, pools };
        self.existed.store(true, Ordering::SeqCst);
        Ok(())
    }
}
