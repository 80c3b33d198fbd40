/* file.h: whole-file reads, folder creation and the program's data files. */
#ifndef BASE_FILE_H
#define BASE_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Reads a whole file (NUL-terminated; *len excludes the NUL) of at most
 * LIMIT_FILE_BYTES (traces/base/limits.h). */
char *file_read(const char *path, size_t *len, char *err);
/* The same with its own limit of max bytes: a regular file larger than
 * that (a sparse one too) is refused by its size before anything is read
 * or allocated; a device or a pipe (/dev/zero) once max bytes came. A
 * folder is refused. The message names the path, the size and the limit. */
char *file_read_max(const char *path, int64_t max, size_t *len, char *err);
/* A byte count for messages: "512 B", "4 MiB", "2.0 GiB". */
void file_size_format(int64_t bytes, char *buf, size_t n);

/* Finds a data file shipped with the program (presets, plot scripts, the
 * sample trace) by its path relative to the repository root: first beside
 * the running binary (a build tree: ./agentreplay or
 * build/<variant>/agentreplay), then under the install prefix
 * (AGENTREPLAY_DATADIR), then relative to the current directory. Writes
 * the path into buf (size n); returns 0, or -1 if not found. */
int file_data_path(const char *rel, char *buf, size_t n);

/* Creates a folder and its parents (as mkdir -p); an error names the part
 * that failed, or a part that exists and is not a folder. */
int file_mkdir_p(const char *path, char *err);

#endif
