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

use crate::core::BoostLedger;
use crate::ports::{LedgerError, LedgerStore};

/// The data key the ledger is stored under.
pub(crate) const LEDGER_KEY: &str = "ledger.json";

/// Keeps a deleted ledger readable until someone removes it on purpose.
pub(crate) const LEDGER_FINALIZER: &str = "spots-booster.io/ledger";

/// A ledger in `namespace/name`.
pub struct ConfigMapLedger {
    api: Api<ConfigMap>,
    name: String,
    /// The resourceVersion last read or written; `None`: the ConfigMap does not exist yet.
    version: Mutex<Option<String>>,
    /// This process has seen the ConfigMap exist: from then on, a missing one was deleted and is
    /// an error, never an empty ledger (that would boost every covered instance again).
    existed: std::sync::atomic::AtomicBool,
    /// `--dry-run`: boosts that were never sent must not be persisted (a later real run would
    /// take their instances as covered), so saves stay in memory.
    dry_run: Option<Mutex<Option<BoostLedger>>>,
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
            version: Mutex::new(None),
            existed: std::sync::atomic::AtomicBool::new(false),
            dry_run: None,
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
        let mut version = self.version.lock().await;
        let Some(cm) = self.api.get_opt(&self.name).await.map_err(|e| LedgerError::Load(e.into()))? else {
            if self.existed.load(Ordering::SeqCst) {
                return Err(LedgerError::Load(
                    format!(
                        "ConfigMap {}/{} was deleted while the daemon ran: refusing to plan from an empty ledger \
                         (restore it, or delete it and restart the daemon to start afresh)",
                        self.api.namespace().unwrap_or_default(),
                        self.name
                    )
                    .into(),
                ));
            }
            *version = None;
            return Ok(BoostLedger::default());
        };
        self.existed.store(true, Ordering::SeqCst);
        *version = cm.metadata.resource_version.clone();
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
        match cm.data.as_ref().and_then(|d| d.get(LEDGER_KEY)) {
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
        let mut version = self.version.lock().await;
        let text = serde_json::to_string(ledger).map_err(|e| LedgerError::Save(e.into()))?;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: version.clone(),
                labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_string(), "spots-booster".to_string())])),
                finalizers: Some(vec![LEDGER_FINALIZER.to_string()]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(LEDGER_KEY.to_string(), text)])),
            ..ConfigMap::default()
        };
        let pp =
            PostParams { field_manager: Some(crate::k8s::writes::FIELD_MANAGER.to_string()), ..PostParams::default() };
        let written = match version.as_ref() {
            None => self.api.create(&pp, &cm).await,
            Some(_) => self.api.replace(&self.name, &pp, &cm).await,
        };
        match written {
            Ok(cm) => {
                *version = cm.metadata.resource_version;
                self.existed.store(true, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => Err(LedgerError::Save(e.into())),
        }
    }
}
