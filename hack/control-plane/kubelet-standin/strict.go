package main

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// wireProblems lists every place in a received message that the generated Go
// types could not account for: unknown fields (typically a wrong field number
// on the sender's side) and enum numbers outside the declared values.
func wireProblems(msg proto.Message) []string {
	var problems []string
	inspect(msg.ProtoReflect(), string(msg.ProtoReflect().Descriptor().Name()), &problems)
	return problems
}

func inspect(m protoreflect.Message, path string, problems *[]string) {
	if unknown := m.GetUnknown(); len(unknown) > 0 {
		*problems = append(*problems, fmt.Sprintf("%s: %d byte(s) of unknown fields %s", path, len(unknown), describeUnknown(unknown)))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		at := path + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				inspectValue(fd.MapValue(), mv, fmt.Sprintf("%s[%q]", at, k.String()), problems)
				return true
			})
		case fd.IsList():
			list := v.List()
			for i := 0; i < list.Len(); i++ {
				inspectValue(fd, list.Get(i), fmt.Sprintf("%s[%d]", at, i), problems)
			}
		default:
			inspectValue(fd, v, at, problems)
		}
		return true
	})
}

func inspectValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string, problems *[]string) {
	switch {
	case fd.Message() != nil:
		inspect(v.Message(), path, problems)
	case fd.Enum() != nil:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			*problems = append(*problems, fmt.Sprintf("%s: enum %s has no value %d", path, fd.Enum().FullName(), v.Enum()))
		}
	}
}

// describeUnknown renders the field numbers and wire types of raw unknown bytes.
func describeUnknown(raw []byte) string {
	var fields []string
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeField(raw)
		if n < 0 {
			fields = append(fields, "(unparsable)")
			break
		}
		fields = append(fields, fmt.Sprintf("#%d/%s", num, wireTypeName(typ)))
		raw = raw[n:]
	}
	return fmt.Sprint(fields)
}

// protoJSON renders a message with proto field names, so Python tests can
// compare keys with the .proto definitions.
func protoJSON(msg proto.Message) json.RawMessage {
	out, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(msg)
	if err != nil {
		return json.RawMessage(fmt.Sprintf("%q", "unrenderable: "+err.Error()))
	}
	return out
}

func wireTypeName(t protowire.Type) string {
	switch t {
	case protowire.VarintType:
		return "varint"
	case protowire.Fixed32Type:
		return "fixed32"
	case protowire.Fixed64Type:
		return "fixed64"
	case protowire.BytesType:
		return "bytes"
	case protowire.StartGroupType, protowire.EndGroupType:
		return "group"
	default:
		return fmt.Sprintf("type%d", t)
	}
}
