//! The admin HTTP servers: `/metrics` (Prometheus text) on one listener, `/livez` (every worker
//! has beaten recently) and `/readyz` (every watch has synced) on another, each with its own
//! connection slots, so scrapers that hold every metrics slot never fail a kubelet probe.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::debug;

use crate::metrics::Metrics;

/// Whether the daemon is ready.
pub(crate) type Readiness = Arc<dyn Fn() -> bool + Send + Sync>;

/// Whether the daemon is alive; the error names what is stuck.
pub(crate) type Liveness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the probes ask.
#[derive(Clone)]
pub(crate) struct Probes {
    /// `/readyz`.
    pub ready: Readiness,
    /// `/livez`.
    pub live: Liveness,
}

/// What a listener serves.
#[derive(Clone)]
pub(crate) enum Endpoints {
    /// `/metrics`.
    Metrics(Arc<Metrics>),
    /// `/livez` (and its old name `/healthz`) and `/readyz`.
    Probes(Probes),
}

impl Endpoints {
    /// The flag that sets this listener's address, for errors.
    fn flag(&self) -> &'static str {
        match self {
            Endpoints::Metrics(_) => "--metrics-bind-address",
            Endpoints::Probes(_) => "--probe-bind-address",
        }
    }
}

/// A server could not start.
#[derive(Debug, Error)]
#[error("cannot listen on {flag} {address}")]
pub struct BindError {
    /// The flag that named the address.
    pub flag: &'static str,
    /// The address.
    pub address: String,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    response
}

/// Answers one request.
pub(crate) fn route(method: &Method, path: &str, endpoints: &Endpoints) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n".into());
    }
    match (endpoints, path) {
        (Endpoints::Metrics(metrics), "/metrics") => {
            respond(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", metrics.encode())
        }
        (Endpoints::Probes(probes), "/livez" | "/healthz") => match (probes.live)() {
            Ok(()) => respond(StatusCode::OK, TEXT, "ok".into()),
            Err(stuck) => respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{stuck}\n")),
        },
        (Endpoints::Probes(probes), "/readyz") if (probes.ready)() => respond(StatusCode::OK, TEXT, "ok".into()),
        (Endpoints::Probes(_), "/readyz") => {
            respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, "watches not synced\n".into())
        }
        _ => respond(StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    }
}

/// What one scraper or prober may cost the daemon.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// A connection whose request headers have not arrived by then is closed.
    pub(crate) header_read: std::time::Duration,
    /// Open connections at most; past it new ones are closed at once.
    pub connections: usize,
    /// Open connections at most from one peer address: a pod holding many cannot take every
    /// slot, so the kubelet's probes (from the node's address) and other scrapers still get one.
    pub(crate) per_peer: usize,
    /// A connection is closed this long after it opened, whatever it is doing: one that
    /// pipelines requests and never reads the answers (its writes block) holds its slot no
    /// longer. Scrapers and probes reconnect.
    pub(crate) lifetime: std::time::Duration,
}

impl Limits {
    /// For `/metrics`: room for every Prometheus replica and a few humans with curl.
    pub(crate) fn metrics() -> Self {
        Limits {
            header_read: std::time::Duration::from_secs(5),
            connections: 256,
            per_peer: 32,
            lifetime: std::time::Duration::from_secs(30),
        }
    }

    /// For the probes: the kubelet opens one connection per probe and closes it.
    pub(crate) fn probes() -> Self {
        Limits { connections: 32, per_peer: 4, lifetime: std::time::Duration::from_secs(10), ..Limits::metrics() }
    }
}

/// Binds `address` to serve `endpoints`; returns the bound address and the server, for the
/// daemon's supervisor to run. Half-open connections are closed after `limits.header_read`, every connection after
/// `limits.lifetime`, at most `limits.connections` are served at once, and a failing accept (descriptors exhausted) backs off instead of spinning.
pub async fn bind(
    address: &str,
    endpoints: Endpoints,
    limits: Limits,
) -> Result<(SocketAddr, impl std::future::Future<Output = ()> + Send + 'static), BindError> {
    let failed = |source| BindError { flag: endpoints.flag(), address: address.to_string(), source };
    let listener = TcpListener::bind(address).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    let slots = Arc::new(Semaphore::new(limits.connections));
    let peers = PeerCounts::default();
    let server = async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    debug!(error = %e, "admin accept failed; backing off");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Some(peer_slot) = peers.take(peer.ip(), limits.per_peer) else {
                debug!(%peer, "admin connection refused: too many open from this peer");
                continue;
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                debug!("admin connection refused: too many open");
                continue;
            };
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                let _slots = (slot, peer_slot);
                let service = service_fn(move |req: Request<Incoming>| {
                    let response = route(req.method(), req.uri().path(), &endpoints);
                    async move { Ok::<_, Infallible>(response) }
                });
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_read)
                    .serve_connection(TokioIo::new(stream), service);
                match tokio::time::timeout(limits.lifetime, connection).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => debug!(error = %e, "admin connection ended"),
                    Err(_) => debug!("admin connection closed: open longer than its lifetime"),
                }
            });
        }
    };
    Ok((bound, server))
}

/// Open connections by peer address.
#[derive(Debug, Clone, Default)]
struct PeerCounts(Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>);

/// One open connection from a peer, counted until dropped.
struct PeerSlot {
    counts: PeerCounts,
    peer: std::net::IpAddr,
}

impl PeerCounts {
    /// A slot for `peer` if it holds fewer than `most` now.
    fn take(&self, peer: std::net::IpAddr, most: usize) -> Option<PeerSlot> {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let open = counts.entry(peer).or_default();
        if *open >= most {
            return None;
        }
        *open += 1;
        Some(PeerSlot { counts: self.clone(), peer })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = counts.get_mut(&self.peer) {
            *open -= 1;
            if *open == 0 {
                counts.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn probes(ready: bool) -> Endpoints {
        Endpoints::Probes(Probes { ready: Arc::new(move || ready), live: Arc::new(|| Ok(())) })
    }

    fn metrics() -> Endpoints {
        Endpoints::Metrics(Arc::new(Metrics::new()))
    }

    /// Sends `GET path` on a new connection; the whole answer.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut body = String::new();
        tokio::time::timeout(std::time::Duration::from_secs(3), stream.read_to_string(&mut body)).await.unwrap().ok();
        body
    }

    #[test]
    fn readyz_follows_readiness_and_metrics_are_prometheus_text() {
        assert_eq!(route(&Method::GET, "/readyz", &probes(false)).status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(route(&Method::GET, "/readyz", &probes(true)).status(), StatusCode::OK);
        assert_eq!(route(&Method::GET, "/livez", &probes(false)).status(), StatusCode::OK);
        let stuck = Endpoints::Probes(Probes {
            ready: Arc::new(|| true),
            live: Arc::new(|| Err("worker:drainer silent for 301s".into())),
        });
        assert_eq!(route(&Method::GET, "/livez", &stuck).status(), StatusCode::SERVICE_UNAVAILABLE);
        let m = route(&Method::GET, "/metrics", &metrics());
        assert!(m.headers()[hyper::header::CONTENT_TYPE].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
        assert_eq!(route(&Method::POST, "/metrics", &metrics()).status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn each_listener_serves_only_its_own_paths() {
        for path in ["/livez", "/healthz", "/readyz"] {
            assert_eq!(route(&Method::GET, path, &metrics()).status(), StatusCode::NOT_FOUND, "{path} on metrics");
        }
        assert_eq!(route(&Method::GET, "/metrics", &probes(true)).status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn half_open_connections_are_closed_and_never_starve_the_probes() {
        let limits = Limits { header_read: std::time::Duration::from_millis(300), connections: 8, ..Limits::probes() };
        let (addr, server) = bind("127.0.0.1:0", probes(true), limits).await.unwrap();
        tokio::spawn(server);
        let mut idle = Vec::new();
        for _ in 0..20 {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        // Every one is closed: past the cap at once, the others once their headers are late.
        for s in &mut idle {
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(std::time::Duration::from_secs(3), s.read(&mut buf)).await;
            assert!(matches!(read, Ok(Ok(_)) | Ok(Err(_))), "a half-open connection stayed open");
        }
        let body = get(addr, "/livez").await;
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    }

    /// A pod holding as many connections as it can never takes the probes' every slot: past
    /// its per-peer share its connections are closed at once, and another address (the
    /// kubelet's) is still answered.
    #[tokio::test]
    async fn one_peer_holding_connections_cannot_starve_the_probes_from_another() {
        let (addr, server) = bind("127.0.0.1:0", probes(true), Limits::probes()).await.unwrap();
        tokio::spawn(server);
        let mut held = Vec::new();
        for _ in 0..64 {
            held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        // Past its share, the hoarder's connections are closed at once (EOF, not a timeout).
        let mut closed = 0;
        for s in &mut held {
            let mut buf = [0u8; 1];
            let read = tokio::time::timeout(std::time::Duration::from_millis(200), s.read(&mut buf)).await;
            closed += usize::from(matches!(read, Ok(Ok(0)) | Ok(Err(_))));
        }
        assert_eq!(closed, 64 - Limits::probes().per_peer, "all but its share are closed");
        // Another address on loopback (the kubelet, in the pod's network), answered at once.
        let kubelet = tokio::net::TcpSocket::new_v4().unwrap();
        kubelet.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut stream = kubelet.connect(addr).await.unwrap();
        stream.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut body = String::new();
        tokio::time::timeout(std::time::Duration::from_secs(2), stream.read_to_string(&mut body))
            .await
            .unwrap()
            .unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        drop(held);
    }

    #[tokio::test]
    async fn a_client_that_never_reads_its_answers_loses_its_slot() {
        let limits = Limits { connections: 1, lifetime: std::time::Duration::from_millis(500), ..Limits::metrics() };
        let metrics = Arc::new(Metrics::new());
        for k in 0..200 {
            metrics.scaler.group_size(&format!("group-{k}"), 3, 10);
        }
        let (addr, server) = bind("127.0.0.1:0", Endpoints::Metrics(metrics), limits).await.unwrap();
        tokio::spawn(server);
        // Pipelined scrapes whose answers (megabytes) are never read: the server's writes block.
        let hostile = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (_unread, mut requests) = hostile.into_split();
        tokio::spawn(async move {
            let many = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2_000);
            let _ = requests.write_all(&many).await;
            std::future::pending::<()>().await;
        });
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        let body = get(addr, "/metrics").await;
        assert!(body.starts_with("HTTP/1.1 200 OK"), "the scrape found the only slot taken: {body:?}");
    }

    #[tokio::test]
    async fn scrapers_holding_every_metrics_slot_never_fail_a_probe() {
        let (metrics_addr, metrics_server) =
            bind("127.0.0.1:0", metrics(), Limits { connections: 4, ..Limits::metrics() }).await.unwrap();
        let (probe_addr, probe_server) = bind("127.0.0.1:0", probes(true), Limits::probes()).await.unwrap();
        tokio::spawn(metrics_server);
        tokio::spawn(probe_server);
        let mut held = Vec::new();
        for _ in 0..4 {
            // A request line without its end: the connection holds a slot until its headers time out.
            let mut s = tokio::net::TcpStream::connect(metrics_addr).await.unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
            held.push(s);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let refused = get(metrics_addr, "/metrics").await;
        assert!(!refused.starts_with("HTTP/1.1 200"), "the metrics slots are all held: {refused:?}");
        for path in ["/livez", "/readyz"] {
            let body = get(probe_addr, path).await;
            assert!(body.starts_with("HTTP/1.1 200 OK"), "{path} while /metrics is full: {body:?}");
        }
    }

    #[tokio::test]
    async fn the_server_answers_over_tcp() {
        let metrics = Arc::new(Metrics::new());
        metrics.lease.leader.set(1);
        let (addr, server) = bind("127.0.0.1:0", Endpoints::Metrics(metrics), Limits::metrics()).await.unwrap();
        tokio::spawn(server);
        let body = get(addr, "/metrics").await;
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(body.contains("spots_booster_leader 1"), "{body}");
    }

    #[tokio::test]
    async fn a_taken_address_is_an_error_naming_its_flag() {
        let (addr, server) = bind("127.0.0.1:0", metrics(), Limits::metrics()).await.unwrap();
        tokio::spawn(server);
        let Err(err) = bind(&addr.to_string(), probes(true), Limits::probes()).await else {
            panic!("two listeners on {addr}");
        };
        assert!(err.to_string().starts_with("cannot listen on --probe-bind-address 127.0.0.1:"), "{err}");
    }
}
