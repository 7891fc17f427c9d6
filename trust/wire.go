package trust

import (
	"encoding/binary"
	"fmt"
)

// CheckpointHeader is the NATS header that carries a checkpoint
// (Checkpoint.MarshalBinary, base64url) on the aggregator's seal control
// message; the message's payload names the checkpoint's number and
// digest, so the chain of the control subject binds it.
const CheckpointHeader = "Asy-Checkpoint"

// EncodeCheckpointHeader is the CheckpointHeader value of c.
func EncodeCheckpointHeader(c *Checkpoint) (string, error) {
	b, err := c.MarshalBinary()
	if err != nil {
		return "", err
	}
	return b64.EncodeToString(b), nil
}

// DecodeCheckpointHeader decodes a CheckpointHeader value (it does not
// check the signature: Checkpoint.Verify does).
func DecodeCheckpointHeader(v string) (*Checkpoint, error) {
	if len(v) > 2*maxFileSize {
		return nil, fmt.Errorf("%w checkpoint header: %d bytes", ErrMalformed, len(v))
	}
	b, err := b64.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%w checkpoint header: %w", ErrMalformed, err)
	}
	return UnmarshalCheckpoint(b)
}

// AppendReceiptMessage appends the payload of a receipt message on a
// party's receipt subject: its sequence number on that subject (u64,
// big-endian; the chain numbers it like any message) and the receipt
// (Receipt.MarshalBinary).
func AppendReceiptMessage(dst []byte, seq uint64, rc *Receipt) ([]byte, error) {
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return rc.AppendBinary(dst)
}

// ParseReceiptMessage decodes a receipt message's payload. It does not
// check signatures (Receipt.Verify does).
func ParseReceiptMessage(data []byte) (uint64, *Receipt, error) {
	if len(data) < 8 {
		return 0, nil, fmt.Errorf("%w receipt message: %d bytes", ErrMalformed, len(data))
	}
	seq := binary.BigEndian.Uint64(data)
	if seq == 0 {
		return 0, nil, fmt.Errorf("%w receipt message: sequence number 0", ErrMalformed)
	}
	rc, err := UnmarshalReceipt(data[8:])
	return seq, rc, err
}
