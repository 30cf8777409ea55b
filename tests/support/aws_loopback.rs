//! For the loopback servers that answer where moto cannot: the SDK configuration that reaches
//! one, and reading one HTTP/1.1 request.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;

/// The SDK configuration for a loopback server at `endpoint` (static test credentials), still
/// open to more settings.
pub fn sdk_loader(endpoint: String) -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_autoscaling::config::Credentials::new("test", "test", None, None, "static"))
}

/// Reads one request's head and body from `stream`; returns the body.
pub fn read_request_body(stream: &TcpStream) -> Vec<u8> {
    let mut reader = BufReader::new(stream.try_clone().expect("a clonable stream"));
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    body
}
