"""What the tests share: fixtures' builders, real servers on 127.0.0.1, tiny models."""
