//! For the loopback servers that answer where moto cannot: serving one, and the SDK
//! configuration that reaches it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

/// Serves HTTP/1.1 on a free loopback port for the rest of the process: each request's body goes
/// to `answer`, which gives the status (`"200 OK"`) and the XML to send back. Returns the endpoint.
pub fn serve(mut answer: impl FnMut(String) -> (&'static str, String) + Send + 'static) -> String {
    serve_with_head(move |_, body| answer(body))
}

/// As [`serve`], and `answer` sees the request's head (request line and headers) too.
pub fn serve_with_head(mut answer: impl FnMut(String, String) -> (&'static str, String) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (head, body) = read_request(&stream);
            let (status, xml) = answer(head, String::from_utf8_lossy(&body).to_string());
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: text/xml;charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
                xml.len()
            );
        }
    });
    endpoint
}

/// The SDK configuration for a loopback server at `endpoint` (static test credentials), still
/// open to more settings.
pub fn sdk_loader(endpoint: String) -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_autoscaling::config::Credentials::new("test", "test", None, None, "static"))
}

/// Reads one request's head and body from `stream`.
fn read_request(stream: &TcpStream) -> (String, Vec<u8>) {
    let mut reader = BufReader::new(stream.try_clone().expect("a clonable stream"));
    next_request(&mut reader).unwrap_or_default()
}

/// Reads the next request's head and body from a kept-alive connection, or `None` once the
/// client has closed it.
pub fn next_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((head, body))
}
