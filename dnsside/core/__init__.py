"""The index and what the answers are, and why: pure (no I/O, no metrics, no logging
policy); sources feed it events, the serving side reads its responder and its views."""
