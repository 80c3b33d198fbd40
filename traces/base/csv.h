/* csv.h: a small reader of CSV files with a header row (the project's own
 * result tables: sweep.csv, fidelity.csv, ...; the trace readers have
 * their own streaming parser, traces/trace_csv.c).
 *
 * Fields may be double-quoted ("" is a quote inside); blank lines are
 * skipped; a row with fewer fields than the header gets "" for the rest,
 * one with more is an error naming its line.
 */
#ifndef BASE_CSV_H
#define BASE_CSV_H

#include <stdbool.h>

struct csv {
    char path[1024];
    int ncol;
    char **hdr;   /* ncol names */
    int nrows;
    char ***rows; /* nrows x ncol fields */
    int *line;    /* source line of each row (1-based) */
};

int csv_read(const char *path, struct csv *c, char *err);
void csv_free(struct csv *c);
/* The column's index, or -1. */
int csv_col(const struct csv *c, const char *name);
/* The number in row r, column name: NaN for an empty field; an error
 * (with the file and line) for a missing column when required, or a
 * malformed number. */
int csv_num_at(const struct csv *c, int r, const char *name, bool required, double *v,
               char *err);
/* The text in row r, column name ("" for a missing column). */
const char *csv_str_at(const struct csv *c, int r, const char *name);

#endif
