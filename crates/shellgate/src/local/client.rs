//! A minimal Responses API client for `shellgate local`: `POST /responses`
//! with `"stream": true`, the model's text printed as it arrives, the
//! final response returned.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

pub struct Client {
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
}

impl Client {
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            // Between two pieces of a stream, not for the whole answer.
            .read_timeout(Duration::from_secs(600))
            .build()
            .context("cannot make an HTTP client")?;
        Ok(Self {
            http,
            url: format!("{}/responses", base_url.trim_end_matches('/')),
            api_key,
        })
    }

    /// Creates a response, streaming: the model's text goes to `text` as it
    /// comes; returns the final response object.
    pub async fn create(&self, body: &Value, text: &mut dyn Write) -> Result<Value> {
        let mut body = body.clone();
        body["stream"] = Value::Bool(true);
        let mut request = self.http.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let mut response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.url))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let message = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or(body);
            anyhow::bail!("{} answered {status}: {message}", self.url);
        }
        let mut buffer = Vec::new();
        loop {
            let chunk = response
                .chunk()
                .await
                .context("the response stream broke off")?;
            let Some(chunk) = chunk else {
                anyhow::bail!("the response stream ended before the response completed");
            };
            buffer.extend_from_slice(&chunk);
            // Server-sent events end with a blank line.
            while let Some(end) = find_event_end(&buffer) {
                let event: Vec<u8> = buffer.drain(..end.0 + end.1).collect();
                let data: String = String::from_utf8_lossy(&event[..end.0])
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect::<Vec<_>>()
                    .join("\n");
                if data.is_empty() || data == "[DONE]" {
                    continue;
                }
                let event: Value = serde_json::from_str(&data)
                    .with_context(|| format!("a stream event is not JSON: {data}"))?;
                match event["type"].as_str().unwrap_or_default() {
                    "response.output_text.delta" => {
                        let _ = text.write_all(event["delta"].as_str().unwrap_or("").as_bytes());
                        let _ = text.flush();
                    }
                    "response.completed" | "response.incomplete" => {
                        return Ok(event["response"].clone());
                    }
                    "response.failed" => {
                        let error = &event["response"]["error"];
                        anyhow::bail!(
                            "the response failed: {}",
                            error["message"].as_str().unwrap_or("no reason given")
                        );
                    }
                    "error" => anyhow::bail!(
                        "the response failed: {}",
                        event["message"]
                            .as_str()
                            .or(event["error"]["message"].as_str())
                            .unwrap_or("no reason given")
                    ),
                    _ => {}
                }
            }
        }
    }
}

/// Where the first event in `buffer` ends: (its length, the separator's).
fn find_event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}
