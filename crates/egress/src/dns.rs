//! Just enough DNS for a container's resolver: one question per query,
//! answered with the addresses the proxy allows, or "no such name" at once
//! (NXDOMAIN rather than REFUSED: resolvers give up on it at once instead
//! of retrying, and programs report a missing host, not a flaky network);
//! REFUSED only for a container over its rate of lookups.
//! And the other side: asking an upstream server for a name's addresses.

use std::net::IpAddr;

/// A query's question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub id: u16,
    pub name: String,
    /// 1 (A), 28 (AAAA), or another type.
    pub qtype: u16,
    /// The question section as received, echoed in the answer.
    raw_question: Vec<u8>,
    /// Whether recursion was desired (echoed).
    recursion: bool,
}

pub const A: u16 = 1;
pub const AAAA: u16 = 28;
const NXDOMAIN: u16 = 3;
const REFUSED: u16 = 5;

/// A query for `name`'s records of type `qtype`, with recursion desired.
pub fn query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let mut packet = Vec::with_capacity(32 + name.len());
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        packet.push(label.len() as u8);
        packet.extend_from_slice(label.as_bytes());
    }
    packet.push(0);
    packet.extend_from_slice(&qtype.to_be_bytes());
    packet.extend_from_slice(&[0, 1]);
    Some(packet)
}

/// The addresses in a response to query `id`: `None` if it is not one.
pub fn parse_response(packet: &[u8], id: u16) -> Option<Vec<IpAddr>> {
    if packet.len() < 12 || u16::from_be_bytes([packet[0], packet[1]]) != id {
        return None;
    }
    let flags = u16::from_be_bytes([packet[2], packet[3]]);
    if flags & 0x8000 == 0 {
        return None;
    }
    if flags & 0x000f != 0 {
        return Some(Vec::new());
    }
    let questions = u16::from_be_bytes([packet[4], packet[5]]);
    let answers = u16::from_be_bytes([packet[6], packet[7]]);
    let mut at = 12;
    for _ in 0..questions {
        at = skip_name(packet, at)? + 4;
    }
    let mut addresses = Vec::new();
    for _ in 0..answers {
        at = skip_name(packet, at)?;
        let rtype = u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]);
        let length = u16::from_be_bytes([*packet.get(at + 8)?, *packet.get(at + 9)?]) as usize;
        let data = packet.get(at + 10..at + 10 + length)?;
        match (rtype, length) {
            (A, 4) => addresses.push(IpAddr::from(<[u8; 4]>::try_from(data).ok()?)),
            (AAAA, 16) => addresses.push(IpAddr::from(<[u8; 16]>::try_from(data).ok()?)),
            _ => {}
        }
        at += 10 + length;
    }
    Some(addresses)
}

/// The offset just past the (possibly compressed) name at `at`.
fn skip_name(packet: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let length = *packet.get(at)?;
        match length {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l if l <= 63 => at += 1 + l as usize,
            _ => return None,
        }
    }
}

/// Reads a query (one question); `None` if it is not one.
pub fn parse_query(packet: &[u8]) -> Option<Question> {
    if packet.len() < 12 {
        return None;
    }
    let id = u16::from_be_bytes([packet[0], packet[1]]);
    let flags = u16::from_be_bytes([packet[2], packet[3]]);
    let questions = u16::from_be_bytes([packet[4], packet[5]]);
    if flags & 0x8000 != 0 || questions != 1 {
        return None;
    }
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let length = *packet.get(at)? as usize;
        at += 1;
        if length == 0 {
            break;
        }
        // No compression pointers in a question we accept.
        if length > 63 {
            return None;
        }
        let label = packet.get(at..at + length)?;
        labels.push(String::from_utf8(label.to_vec()).ok()?);
        at += length;
        if at > 12 + 255 {
            return None;
        }
    }
    let qtype = u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]);
    packet.get(at + 2..at + 4)?;
    Some(Question {
        id,
        name: labels.join("."),
        qtype,
        raw_question: packet[12..at + 4].to_vec(),
        recursion: flags & 0x0100 != 0,
    })
}

/// The refusal of `question` (REFUSED, no records): for a container over
/// its rate of lookups, whose resolver should report a failure at once,
/// not a missing name.
pub fn refused(question: &Question) -> Vec<u8> {
    let mut reply = answer(question, &[], 0, false);
    if let Some(flags) = reply.get_mut(3) {
        *flags |= REFUSED as u8;
    }
    reply
}

/// The answer to `question`: `addresses` (those of its type) with `ttl`,
/// or, with `refused`, NXDOMAIN.
pub fn answer(question: &Question, addresses: &[IpAddr], ttl: u32, refused: bool) -> Vec<u8> {
    let records: Vec<&IpAddr> = addresses
        .iter()
        .filter(|a| match question.qtype {
            A => a.is_ipv4(),
            AAAA => a.is_ipv6(),
            _ => false,
        })
        .collect();
    let records = if refused { Vec::new() } else { records };
    let mut flags: u16 = 0x8000 | 0x0080; // response, recursion available
    if question.recursion {
        flags |= 0x0100;
    }
    if refused {
        flags |= NXDOMAIN;
    }
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&question.id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&question.raw_question);
    for address in records {
        out.extend_from_slice(&[0xc0, 12]); // the name, by pointer to the question
        out.extend_from_slice(&question.qtype.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        match address {
            IpAddr::V4(v4) => {
                out.extend_from_slice(&4u16.to_be_bytes());
                out.extend_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                out.extend_from_slice(&16u16.to_be_bytes());
                out.extend_from_slice(&v6.octets());
            }
        }
    }
    out
}

/// The parsers' invariants over any bytes, shared by the unit tests, the
/// fuzz target `egress_dns` (`fuzz/`) and the stable runner.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    use super::*;

    /// Inputs to start from: queries of each type, and an answer.
    pub fn seeds() -> Vec<Vec<u8>> {
        let mut seeds: Vec<Vec<u8>> = [(A, "a.test"), (AAAA, "deep.sub.example.org"), (16, "x")]
            .iter()
            .filter_map(|(qtype, name)| query(0x1234, name, *qtype))
            .collect();
        if let Some(question) = seeds.first().and_then(|q| parse_query(q)) {
            seeds.push(answer(
                &question,
                &[IpAddr::from([192, 0, 2, 7])],
                30,
                false,
            ));
        }
        seeds
    }

    /// Any bytes as a container's query: [`parse_query`] never panics; a
    /// question it accepts has a name of at most 255 bytes, and its answer
    /// (and refusal) reads back, through [`parse_response`], as exactly
    /// the addresses of its type. Any bytes as an upstream's response:
    /// [`parse_response`] never panics nor returns more addresses than
    /// the packet could hold. Returns whether the query was accepted.
    pub fn check_query(bytes: &[u8]) -> bool {
        if let Some(addresses) = parse_response(
            bytes,
            u16::from_be_bytes([
                bytes.first().copied().unwrap_or(0),
                bytes.get(1).copied().unwrap_or(0),
            ]),
        ) {
            assert!(addresses.len() <= bytes.len() / 14);
        }
        let Some(question) = parse_query(bytes) else {
            return false;
        };
        assert!(question.name.len() <= 255, "{question:?}");
        let v4 = IpAddr::from([192, 0, 2, 1]);
        let v6 = IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]);
        let expected: Vec<IpAddr> = match question.qtype {
            A => vec![v4],
            AAAA => vec![v6],
            _ => vec![],
        };
        let reply = answer(&question, &[v4, v6], 60, false);
        assert_eq!(
            parse_response(&reply, question.id),
            Some(expected),
            "{question:?}"
        );
        let nxdomain = answer(&question, &[v4, v6], 60, true);
        assert_eq!(parse_response(&nxdomain, question.id), Some(vec![]));
        assert_eq!(
            parse_response(&refused(&question), question.id),
            Some(vec![])
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_queries_are_refused_or_answered_soundly() {
        let mut accepted = 0;
        for name in ["a.test", "x", "deep.sub.example.org"] {
            for qtype in [A, AAAA, 16] {
                let Some(packet) = super::query(7, name, qtype) else {
                    continue;
                };
                // Every truncation of a good query, and the query itself.
                for end in 0..=packet.len() {
                    if fuzzing::check_query(&packet[..end]) {
                        accepted += 1;
                    }
                }
            }
        }
        assert_eq!(accepted, 9);
        // Compression pointers, a label of 64, a response as a query.
        for bytes in [
            &b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01"[..],
            b"\x00\x01\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x00\x00\x01\x00\x01\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x01\x02\x03\x04",
        ] {
            assert!(!fuzzing::check_query(bytes));
        }
    }

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut packet = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            packet.push(label.len() as u8);
            packet.extend_from_slice(label.as_bytes());
        }
        packet.push(0);
        packet.extend_from_slice(&qtype.to_be_bytes());
        packet.extend_from_slice(&[0, 1]);
        packet
    }

    #[test]
    fn queries_are_read_and_answered() {
        let question = parse_query(&query("a.allowed.test", A)).unwrap();
        assert_eq!(question.name, "a.allowed.test");
        assert_eq!(question.id, 0x1234);
        let addresses: Vec<IpAddr> = vec![
            "203.0.113.7".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
        ];
        let reply = answer(&question, &addresses, 30, false);
        assert_eq!(&reply[..2], &[0x12, 0x34]);
        assert_eq!(u16::from_be_bytes([reply[6], reply[7]]), 1, "one A record");
        assert_eq!(&reply[reply.len() - 4..], &[203, 0, 113, 7]);
        let refused = answer(&question, &addresses, 30, true);
        assert_eq!(refused[3] & 0x0f, 3, "NXDOMAIN");
        assert_eq!(u16::from_be_bytes([refused[6], refused[7]]), 0);
        assert!(parse_query(&[0; 5]).is_none());
        // Our own answers read back with the client side.
        assert_eq!(
            parse_response(&reply, 0x1234),
            Some(vec!["203.0.113.7".parse().unwrap()])
        );
        assert_eq!(parse_response(&refused, 0x1234), Some(vec![]));
        assert_eq!(parse_response(&reply, 0x9999), None);
        assert_eq!(super::query(7, "a.test", A).unwrap(), {
            let mut q = query("a.test", A);
            q[0] = 0;
            q[1] = 7;
            q
        });
        let mut bad = query("x.test", A);
        bad[12] = 200;
        assert!(parse_query(&bad).is_none());
    }
}
