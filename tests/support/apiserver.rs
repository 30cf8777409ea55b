//! A local HTTP server standing in for kube-apiserver: every request reaches the test, which
//! answers it the way kube-apiserver would (status codes, `Status` bodies, `Retry-After`). The
//! client under test is the daemon's own (`k8s::client::build_client`), so its layers (retries,
//! timeouts) are part of what is tested.

#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::{Client, Config};
use tokio::sync::{mpsc, oneshot};

/// One request waiting for the test's answer.
pub type Pending = (Request<Bytes>, Responder);

/// Sends the answer to one request.
pub struct Responder(oneshot::Sender<Response<Full<Bytes>>>);

impl Responder {
    /// Answers the request.
    pub fn send_response(self, response: Response<Full<Bytes>>) {
        let _ = self.0.send(response);
    }
}

/// The test's end of the server.
pub struct ApiServer {
    requests: mpsc::UnboundedReceiver<Pending>,
    hits: Arc<AtomicUsize>,
}

impl ApiServer {
    /// The next request, once it arrives (`None` when the server is gone).
    pub async fn next_request(&mut self) -> Option<Pending> {
        self.requests.recv().await
    }

    /// Requests received so far, answered or not.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Starts a server on a free loopback port and returns the daemon's client for it, with the
/// request budget `run` has by default.
pub async fn start() -> (Client, ApiServer) {
    start_with(&spots_booster::k8s::budget::RequestBudget::daemon_default()).await
}

/// [`start`], the client's requests within `budget`.
pub async fn start_with(budget: &spots_booster::k8s::budget::RequestBudget) -> (Client, ApiServer) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel::<Pending>();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (tx, counted) = (tx.clone(), counted.clone());
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let (tx, counted) = (tx.clone(), counted.clone());
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let (parts, body) = request.into_parts();
                        let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let (send, answer) = oneshot::channel();
                        if tx.send((Request::from_parts(parts, bytes), Responder(send))).is_err() {
                            return Ok::<_, Infallible>(Response::builder().status(503).body(Full::default()).unwrap());
                        }
                        // A request the test never answers (a watch) waits until the test ends.
                        Ok(answer
                            .await
                            .unwrap_or_else(|_| Response::builder().status(503).body(Full::default()).unwrap()))
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    let config = Config::new(url.parse().expect("a valid URL"));
    let client = spots_booster::k8s::client::build_client(config, budget).expect("the daemon's client builds");
    (client, ApiServer { requests: rx, hits })
}

/// An answer with a JSON body.
pub fn reply(status: u16, body: serde_json::Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap()
}

/// kube-apiserver's answer to an eviction a PodDisruptionBudget refuses: 429, `Retry-After: 10`,
/// and its `Status` body.
pub fn pdb_refusal() -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {"causes": [{"reason": "DisruptionBudget",
            "message": "The disruption budget web needs 3 healthy pods and has 3 currently"}],
            "retryAfterSeconds": 10},
        "code": 429});
    let mut response = reply(429, body);
    response.headers_mut().insert("Retry-After", "10".parse().unwrap());
    response
}
