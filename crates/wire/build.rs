//! Generates envd's message types (E2B's in-sandbox protocol)
//! from the descriptors the E2B SDK ships, committed as
//! `proto/envd.binpb` (`scripts/envd-descriptors.py` extracts them and the
//! test suite checks they still match the installed SDK): prost structs for
//! the messages, and pbjson's serde impls for the proto3 JSON mapping
//! Connect's JSON codec speaks. No `protoc` is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let descriptors_path = PathBuf::from("proto/envd.binpb");
    println!("cargo:rerun-if-changed={}", descriptors_path.display());
    let descriptors = std::fs::read(&descriptors_path)?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);

    let mut set: prost_types::FileDescriptorSet = prost::Message::decode(descriptors.as_slice())?;
    // filesystem.proto imports the well-known Timestamp; prost-build needs
    // its descriptor to reason about the messages that hold one (the type
    // itself is pbjson_types', below).
    set.file.push(timestamp_descriptor());
    let descriptors = prost::Message::encode_to_vec(&set);
    let mut config = prost_build::Config::new();
    config
        .out_dir(&out)
        // Timestamps are pbjson_types' (with serde), not prost_types'.
        .compile_well_known_types()
        .extern_path(".google.protobuf", "::pbjson_types")
        // The generated code documents itself with the .proto's comments,
        // which the compiled descriptors do not carry.
        .disable_comments(["."]);
    config.compile_fds(set)?;

    pbjson_build::Builder::new()
        .register_descriptors(&descriptors)?
        .out_dir(&out)
        .extern_path(".google.protobuf", "::pbjson_types")
        // Connect's JSON codec in the SDKs ignores fields it does not know;
        // so does the server, so a newer SDK's additions do not break it.
        .ignore_unknown_fields()
        .build(&[".process", ".filesystem"])?;
    Ok(())
}

/// `google/protobuf/timestamp.proto`: `message Timestamp { int64 seconds = 1;
/// int32 nanos = 2; }`, a fixed well-known type.
fn timestamp_descriptor() -> prost_types::FileDescriptorProto {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};
    let field = |name: &str, number: i32, kind: Type| FieldDescriptorProto {
        name: Some(name.to_owned()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(kind as i32),
        json_name: Some(name.to_owned()),
        ..Default::default()
    };
    FileDescriptorProto {
        name: Some("google/protobuf/timestamp.proto".to_owned()),
        package: Some("google.protobuf".to_owned()),
        message_type: vec![DescriptorProto {
            name: Some("Timestamp".to_owned()),
            field: vec![
                field("seconds", 1, Type::Int64),
                field("nanos", 2, Type::Int32),
            ],
            ..Default::default()
        }],
        syntax: Some("proto3".to_owned()),
        ..Default::default()
    }
}
