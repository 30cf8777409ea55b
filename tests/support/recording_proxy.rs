//! A loopback proxy in front of moto that notes each Auto Scaling request the daemon sends, and
//! when: the gated e2e suites measure reactions to the request, not to moto's answer.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the daemon sent: its `Action`, the group it names (if any), and when it arrived.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The Query API action.
    pub action: String,
    /// The group the request names.
    pub group: Option<String>,
    /// When the proxy received it.
    pub at: Instant,
}

/// Every request forwarded so far, in order.
pub type Log = Arc<Mutex<Vec<Sent>>>;

/// The value of `key` in a form-encoded request body found in `text`.
fn form_value(text: &str, key: &str) -> Option<String> {
    let start = text.find(&format!("{key}="))? + key.len() + 1;
    let value = &text[start..];
    let end = value.find(|c: char| c == '&' || c.is_whitespace()).unwrap_or(value.len());
    Some(value[..end].replace("%2F", "/").replace("%3A", ":"))
}

/// A loopback proxy to `upstream` (moto) that logs every Query-API request it forwards. The SDK
/// writes each small request in one go, so a read holds a whole request's form body.
pub async fn recording_proxy(upstream: String) -> (String, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let log: Log = Arc::default();
    let kept = log.clone();
    let upstream = upstream.trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else { return };
            let (upstream, log) = (upstream.clone(), kept.clone());
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&upstream).await else { return };
                let (mut from_client, mut to_server) = (client.into_split(), server.into_split());
                let answers = tokio::spawn(async move { tokio::io::copy(&mut to_server.0, &mut from_client.1).await });
                let mut buffer = vec![0u8; 64 * 1024];
                loop {
                    let n = match from_client.0.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let text = String::from_utf8_lossy(&buffer[..n]);
                    if let Some(action) = form_value(&text, "Action") {
                        let group = form_value(&text, "AutoScalingGroupName");
                        log.lock().unwrap().push(Sent { action, group, at: Instant::now() });
                    }
                    if to_server.1.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
                answers.abort();
            });
        }
    });
    (address, log)
}
