#!/usr/bin/python3
"""An independent reader of TensorBoard event files, for tests/cli/tensorboard.sh.

Parses every record of each file given (TFRecord framing, checking both masked CRC-32Cs with
crcmod's 'crc-32c', not Tessera's code) with Python's protobuf runtime and a copy of the fields
of tensorflow/core/util/event.proto and summary.proto that Tessera writes:

    message Event   { double wall_time = 1; int64 step = 2;
                      oneof what { string file_version = 3; Summary summary = 5; } }
    message Summary { message Value { string tag = 1; float simple_value = 2; }
                      repeated Value value = 1; }

(built here as descriptors: the runtime needs no protoc). Prints one JSON object per record:
{"file_version": ...} or {"step": S, "tag": T, "value": V}. Exits 1 on a bad CRC or framing.
"""
import json
import struct
import sys

import crcmod.predefined
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

CRC32C = crcmod.predefined.mkCrcFun("crc-32c")
F = descriptor_pb2.FieldDescriptorProto


def masked(data):
    c = CRC32C(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    fdp = descriptor_pb2.FileDescriptorProto(name="tessera_test_event.proto", package="tensorflow",
                                             syntax="proto3")
    summary = fdp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tensorflow.Summary.Value")
    event = fdp.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.oneof_decl.add(name="what")
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tensorflow.Summary", oneof_index=0)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.MessageFactory(pool).GetPrototype(
        pool.FindMessageTypeByName("tensorflow.Event"))


def main():
    Event = event_class()
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        at = 0
        while at < len(data):
            header = data[at:at + 8]
            if len(header) < 8 or len(data) < at + 12:
                sys.exit(f"{path}: truncated record header at byte {at}")
            (length,) = struct.unpack("<Q", header)
            (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
            if length_crc != masked(header):
                sys.exit(f"{path}: bad length CRC at byte {at}")
            body = data[at + 12:at + 12 + length]
            if len(body) < length or len(data) < at + 16 + length:
                sys.exit(f"{path}: truncated record at byte {at}")
            (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
            if body_crc != masked(body):
                sys.exit(f"{path}: bad data CRC at byte {at}")
            e = Event()
            e.ParseFromString(body)
            if e.WhichOneof("what") == "file_version":
                print(json.dumps({"file_version": e.file_version, "wall_time": e.wall_time}))
            else:
                for v in e.summary.value:
                    print(json.dumps({"step": e.step, "tag": v.tag, "value": v.simple_value,
                                      "wall_time": e.wall_time}))
            at += 16 + length


if __name__ == "__main__":
    main()
