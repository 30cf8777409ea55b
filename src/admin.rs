//! The admin HTTP server: `/metrics` (Prometheus text), `/livez` (every worker has beaten
//! recently) and `/readyz` (every watch has synced).

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

/// The server could not start.
#[derive(Debug, Error)]
#[error("cannot listen on --metrics-bind-address {address}")]
pub struct BindError {
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
pub(crate) fn route(method: &Method, path: &str, metrics: &Metrics, probes: &Probes) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n".into());
    }
    match path {
        "/metrics" => respond(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", metrics.encode()),
        "/livez" | "/healthz" => match (probes.live)() {
            Ok(()) => respond(StatusCode::OK, TEXT, "ok".into()),
            Err(stuck) => respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{stuck}\n")),
        },
        "/readyz" if (probes.ready)() => respond(StatusCode::OK, TEXT, "ok".into()),
        "/readyz" => respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, "watches not synced\n".into()),
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
    /// A connection is closed this long after it opened, whatever it is doing: one that
    /// pipelines requests and never reads the answers (its writes block) holds its slot no
    /// longer. Scrapers and probes reconnect.
    pub(crate) lifetime: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read: std::time::Duration::from_secs(5),
            connections: 256,
            lifetime: std::time::Duration::from_secs(30),
        }
    }
}

/// Binds `address`; returns the bound address and the server, for the daemon's supervisor to run.
/// Half-open connections are closed after `limits.header_read`, every connection after
/// `limits.lifetime`, at most `limits.connections` are served at once, and a failing accept (descriptors exhausted) backs off instead of spinning.
pub async fn bind(
    address: &str,
    metrics: Arc<Metrics>,
    probes: Probes,
    limits: Limits,
) -> Result<(SocketAddr, impl std::future::Future<Output = ()> + Send + 'static), BindError> {
    let listener =
        TcpListener::bind(address).await.map_err(|source| BindError { address: address.to_string(), source })?;
    let bound = listener.local_addr().map_err(|source| BindError { address: address.to_string(), source })?;
    let slots = Arc::new(Semaphore::new(limits.connections));
    let server = async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    debug!(error = %e, "admin accept failed; backing off");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                debug!("admin connection refused: too many open");
                continue;
            };
            let (metrics, probes) = (metrics.clone(), probes.clone());
            tokio::spawn(async move {
                let _slot = slot;
                let service = service_fn(move |req: Request<Incoming>| {
                    let response = route(req.method(), req.uri().path(), &metrics, &probes);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Binds `address` and serves until the runtime stops; returns the bound address.
    async fn serve(address: &str, metrics: Arc<Metrics>, probes: Probes) -> Result<SocketAddr, BindError> {
        let (bound, server) = bind(address, metrics, probes, Limits::default()).await?;
        tokio::spawn(server);
        Ok(bound)
    }

    fn probes(ready: bool) -> Probes {
        Probes { ready: Arc::new(move || ready), live: Arc::new(|| Ok(())) }
    }

    #[test]
    fn readyz_follows_readiness_and_metrics_are_prometheus_text() {
        let metrics = Metrics::new();
        let not_ready = probes(false);
        let ready = probes(true);
        assert_eq!(route(&Method::GET, "/readyz", &metrics, &not_ready).status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(route(&Method::GET, "/readyz", &metrics, &ready).status(), StatusCode::OK);
        assert_eq!(route(&Method::GET, "/livez", &metrics, &not_ready).status(), StatusCode::OK);
        let stuck = Probes { live: Arc::new(|| Err("worker:drainer silent for 301s".into())), ..ready.clone() };
        let livez = route(&Method::GET, "/livez", &metrics, &stuck);
        assert_eq!(livez.status(), StatusCode::SERVICE_UNAVAILABLE);
        let m = route(&Method::GET, "/metrics", &metrics, &ready);
        assert!(m.headers()[hyper::header::CONTENT_TYPE].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
        assert_eq!(route(&Method::POST, "/metrics", &metrics, &ready).status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    #[tokio::test]
    async fn half_open_connections_are_closed_and_never_starve_the_probes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = Limits { header_read: std::time::Duration::from_millis(300), connections: 8, ..Limits::default() };
        let (addr, server) = bind("127.0.0.1:0", Arc::new(Metrics::new()), probes(true), limits).await.unwrap();
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
        let mut probe = tokio::net::TcpStream::connect(addr).await.unwrap();
        probe.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut body = String::new();
        probe.read_to_string(&mut body).await.unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    }

    #[tokio::test]
    async fn a_client_that_never_reads_its_answers_loses_its_slot() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = Limits { connections: 1, lifetime: std::time::Duration::from_millis(500), ..Limits::default() };
        let metrics = Arc::new(Metrics::new());
        for k in 0..200 {
            metrics.scaler.group_size(&format!("group-{k}"), 3, 10);
        }
        let (addr, server) = bind("127.0.0.1:0", metrics, probes(true), limits).await.unwrap();
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
        let mut probe = tokio::net::TcpStream::connect(addr).await.unwrap();
        probe.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut body = String::new();
        tokio::time::timeout(std::time::Duration::from_secs(3), probe.read_to_string(&mut body)).await.unwrap().ok();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "the probe found the only slot taken: {body:?}");
    }

    #[tokio::test]
    async fn the_server_answers_over_tcp() {
        let metrics = Arc::new(Metrics::new());
        metrics.lease.leader.set(1);
        let addr = serve("127.0.0.1:0", metrics, probes(true)).await.unwrap();
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).await.unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(body.contains("spots_booster_leader 1"), "{body}");
    }
}
