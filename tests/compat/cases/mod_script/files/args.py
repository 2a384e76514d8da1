import sys
print("python", " ".join(sys.argv[1:]))
open("py-ran", "w").write("yes\n")
