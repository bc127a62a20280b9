-- Values every process of the world must agree on, set once by the first process that needs
-- them (the key hook tokens are derived from, when none is configured).
CREATE TABLE settings (
    name  text COLLATE "C" PRIMARY KEY,
    value text NOT NULL
);
