-- Quickstart database "school" (SQLite). Part of polysql_ray's own quickstart benchmark.
-- Deliberate traps: 'Smith' vs 'smith' (LIKE case), a NULL gpa, two students tied on gpa
-- 3.60, ungraded enrollments (NULL score), a course without enrollments, ISO birth dates.
CREATE TABLE students (
  student_id  INTEGER PRIMARY KEY,
  first_name  TEXT NOT NULL,
  last_name   TEXT NOT NULL,
  grade_level INTEGER NOT NULL,
  birth_date  TEXT NOT NULL,     -- 'YYYY-MM-DD'
  gpa         REAL               -- NULL = not computed yet
);
INSERT INTO students VALUES
  (1, 'Liam',   'Nguyen',  9, '2010-04-12', 3.40),
  (2, 'Olivia', 'Smith',  10, '2009-09-30', 3.85),
  (3, 'Noah',   'Garcia', 10, '2009-01-17', 2.95),
  (4, 'Emma',   'Brown',  11, '2008-11-02', 3.60),
  (5, 'Ava',    'Lopez',  12, '2007-06-21', NULL),
  (6, 'Mia',    'smith',   9, '2010-02-08', 3.10),
  (7, 'Lucas',  'Kim',    11, '2008-07-19', 3.60),
  (8, 'Sofia',  'Rossi',  10, '2009-12-25', 3.33);

CREATE TABLE courses (
  course_id INTEGER PRIMARY KEY,
  title     TEXT NOT NULL,
  dept      TEXT NOT NULL,
  credits   INTEGER NOT NULL
);
INSERT INTO courses VALUES
  (1, 'Algebra I',     'Math',    4),
  (2, 'Geometry',      'Math',    3),
  (3, 'Biology',       'Science', 4),
  (4, 'Chemistry',     'Science', 4),
  (5, 'World History', 'History', 3),
  (6, 'Art Studio',    'Arts',    2);

CREATE TABLE enrollments (
  student_id INTEGER NOT NULL REFERENCES students (student_id),
  course_id  INTEGER NOT NULL REFERENCES courses (course_id),
  term       TEXT NOT NULL,      -- '2024-spring' | '2024-fall'
  score      INTEGER,            -- NULL = not graded yet
  PRIMARY KEY (student_id, course_id, term)
);
INSERT INTO enrollments VALUES
  (1, 1, '2024-fall',   88), (1, 3, '2024-fall',   NULL),
  (2, 2, '2024-fall',   95), (2, 4, '2024-fall',   91), (2, 3, '2024-spring', 89),
  (3, 2, '2024-fall',   72), (3, 5, '2024-spring', 80),
  (4, 4, '2024-spring', 85), (4, 1, '2024-fall',   NULL),
  (6, 1, '2024-fall',   79),
  (7, 3, '2024-spring', 91),
  (8, 5, '2024-fall',   66), (8, 3, '2024-fall',   91);
