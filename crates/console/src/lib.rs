//! The web console's static app: `assets/` (an HTML page, ES modules, CSS,
//! and xterm.js from npm, unmodified: `assets/vendor/xterm/`), embedded in
//! the binary by `build.rs` so `shellgate serve` serves the console with no
//! second service and no build step. The server's `console` module serves
//! these files and the JSON the app reads; this crate only holds the bytes.

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// Its path below `assets/`, `/`-separated (`app.js`, `vendor/xterm/xterm.js`).
    pub path: &'static str,
    pub content_type: &'static str,
    /// A quoted content hash, for `ETag` and `If-None-Match`.
    pub etag: &'static str,
    pub bytes: &'static [u8],
    /// The same bytes gzipped, for a browser that takes gzip (text files
    /// only, where it saves something).
    pub gzip: Option<&'static [u8]>,
}

/// Every embedded file, sorted by path.
pub static ASSETS: &[Asset] = include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// The file at `path` (below `assets/`), if there is one.
pub fn asset(path: &str) -> Option<&'static Asset> {
    ASSETS
        .binary_search_by(|asset| asset.path.cmp(path))
        .ok()
        .and_then(|index| ASSETS.get(index))
}

/// The app's page, served at `/console`.
pub fn index() -> Option<&'static Asset> {
    asset("index.html")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_sorted_and_found_by_path() {
        assert!(ASSETS.windows(2).all(|w| w[0].path < w[1].path));
        for asset in ASSETS {
            assert_eq!(super::asset(asset.path).map(|a| a.path), Some(asset.path));
            assert!(!asset.path.starts_with('/') && !asset.path.contains(".."));
        }
        assert!(super::asset("../Cargo.toml").is_none());
        assert!(index().is_some(), "assets/index.html is the app");
        for asset in ASSETS.iter().filter(|a| a.gzip.is_some()) {
            assert!(asset
                .gzip
                .is_some_and(|g| g.len() < asset.bytes.len() && g.starts_with(&[0x1f, 0x8b])));
        }
    }
}
