//! Who may use a sandbox's in-sandbox API: `E2b-Sandbox-Id` names it, and
//! `X-Access-Token` must be the token its create issued (owned by the
//! control-plane engineer; see /work/notes/i20/api.md "Access").
