-- Quickstart database "shop" (SQLite). Part of polysql_ray's own quickstart benchmark.
-- Deliberate traps: a table name with a space ("order items"), a MixedCase column
-- ("StockQty"), NULL vs '' emails, ISO-8601 dates stored as TEXT, prices as REAL with two
-- decimals, three products tied on price 7.10, a customer with NULL city.
CREATE TABLE customers (
  customer_id INTEGER PRIMARY KEY,
  name        TEXT NOT NULL,
  email       TEXT,              -- NULL = unknown; '' = left blank on purpose
  city        TEXT,
  signup_date TEXT NOT NULL      -- 'YYYY-MM-DD'
);
INSERT INTO customers VALUES
  (1, 'Anna Schmidt',  'anna@example.com',  'Berlin', '2023-01-15'),
  (2, 'Joanne Baker',  NULL,                'London', '2023-03-02'),
  (3, 'Bob Stone',     '',                  'Berlin', '2023-03-20'),
  (4, 'Carla Diaz',    'carla@example.com', 'Madrid', '2023-07-11'),
  (5, 'Dmitri Ivanov', NULL,                'London', '2024-01-05'),
  (6, 'Eve Martin',    'eve@example.com',   'Paris',  '2024-02-29'),
  (7, 'Frank Hanna',   'frank@example.com', 'Berlin', '2024-03-14'),
  (8, 'Grace Ho',      'grace@example.com', NULL,     '2024-05-30');

CREATE TABLE products (
  product_id INTEGER PRIMARY KEY,
  name       TEXT NOT NULL,
  category   TEXT NOT NULL,
  price      REAL NOT NULL,      -- currency units, two decimals
  "StockQty" INTEGER NOT NULL
);
INSERT INTO products VALUES
  (1, 'Notebook',     'Stationery',  2.50, 120),
  (2, 'Fountain Pen', 'Stationery', 19.99,  15),
  (3, 'SQL Primer',   'Books',      29.99,   8),
  (4, 'Data Atlas',   'Books',      45.00,   3),
  (5, 'Desk Lamp',    'Home',       24.99,   0),
  (6, 'Mug',          'Home',        7.10,  40),
  (7, 'Poster',       'Home',        7.10,  25),
  (8, 'Stapler',      'Stationery',  7.10,  30),
  (9, 'Puzzle Book',  'Books',      12.35,  12);

CREATE TABLE orders (
  order_id    INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers (customer_id),
  order_date  TEXT NOT NULL,     -- 'YYYY-MM-DD'
  status      TEXT NOT NULL      -- 'shipped' | 'pending' | 'cancelled'
);
INSERT INTO orders VALUES
  (101, 1, '2023-03-05', 'shipped'),
  (102, 1, '2024-03-18', 'shipped'),
  (103, 2, '2023-06-30', 'cancelled'),
  (104, 3, '2024-03-02', 'pending'),
  (105, 4, '2024-01-20', 'shipped'),
  (106, 4, '2024-03-31', 'shipped'),
  (107, 6, '2024-04-01', 'pending'),
  (108, 7, '2024-05-12', 'shipped'),
  (109, 1, '2024-06-03', 'cancelled');

CREATE TABLE "order items" (
  order_id   INTEGER NOT NULL REFERENCES orders (order_id),
  product_id INTEGER NOT NULL REFERENCES products (product_id),
  quantity   INTEGER NOT NULL,
  unit_price REAL NOT NULL,      -- price paid (may differ from the list price)
  PRIMARY KEY (order_id, product_id)
);
INSERT INTO "order items" VALUES
  (101, 1,  4,  2.50), (101, 3, 1, 29.99),
  (102, 2,  1, 19.99), (102, 9, 2, 12.35),
  (103, 4,  1, 45.00),
  (104, 6,  2,  7.10), (104, 7, 1,  7.10),
  (105, 3,  1, 27.99), (105, 1, 10, 2.50),
  (106, 8,  1,  7.10),
  (107, 5,  1, 24.99),
  (108, 4,  1, 45.00), (108, 6, 3,  7.10),
  (109, 1,  2,  2.50);
